"""What more than one gate needs and none owns: the result every gate returns (`result`)
and how its figures are rounded for people (`shown`), the gates' settings that the handoff
spec embeds (`settings`), the statistics both the latency and the task decisions draw on
(`stats`), the prompt format parity and task suites share (`prompts`), the way from a
figure to a PNG or markdown (`picture`), and the blocking wrapper of the async gates
(`blocking`). It imports none of the gates (parity, latency, task) and nothing of `http`.
"""
