"""Discovery details that real servers differ on, from the answers they give: which way
echoed prompt logprobs are aligned (llama-cpp-python lists the distribution after token i at
position i) and where completions `text_offset` counts from."""

from __future__ import annotations

from gates.http.capabilities import echo_alignment
from gates.parity.logprobs import parse_completion_logprobs

PROMPT = "1 2 3 4 5 6"
TOKENS = ["1", " 2", " 3", " 4", " 5", " 6"]
OFFSETS = [0, 1, 3, 5, 7, 9]


def predicting(i: int) -> dict[str, float]:
    """The distribution that predicts token i: confident in it."""
    return {TOKENS[i]: -0.05, " 9": -4.0} if i < len(TOKENS) else {" 7": -0.05}


def echo(shifted: bool) -> dict:
    tops = [predicting(i + 1) if shifted else predicting(i) for i in range(len(TOKENS))]
    values = [top.get(TOKENS[i], -9.0) if not shifted else -9.0 for i, top in enumerate(tops)]
    tops[0], values[0] = None, None  # both conventions null the first position
    return {
        "tokens": TOKENS,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": OFFSETS,
    }


def test_echo_alignment_is_read_from_the_likelier_reading() -> None:
    assert echo_alignment(echo(shifted=False), PROMPT) == "predicts-this"
    assert echo_alignment(echo(shifted=True), PROMPT) == "predicts-next"


def test_text_offsets_counting_the_prompt_give_the_same_pieces() -> None:
    text = "ab cd"
    ids = ["token_id:1", "token_id:2", "token_id:3"]
    tops = [{t: -0.1} for t in ids]
    for base in (0, 42):  # vLLM counts from the completion, OpenAI's legacy from the prompt
        logprobs = {
            "tokens": ids,
            "token_logprobs": [-0.1] * 3,
            "top_logprobs": tops,
            "text_offset": [base + 0, base + 2, base + 3],
        }
        steps = parse_completion_logprobs(logprobs, text)
        assert [s.piece for s in steps] == ["ab", " ", "cd"]
        assert [s.token_id for s in steps] == [1, 2, 3]
