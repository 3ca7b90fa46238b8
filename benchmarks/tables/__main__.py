"""Print docs/performance.md's generated blocks, or write them into the page (`--docs`)."""

from __future__ import annotations

import argparse

from benchmarks.tables import PAGE, rendering, with_blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", action="store_true", help=f"write them into {PAGE}")
    args = parser.parse_args()
    texts = rendering()
    if args.docs:
        PAGE.write_text(with_blocks(PAGE.read_text(), texts))
        print(f"wrote {len(texts)} blocks into {PAGE}")
        return
    for name, text in texts.items():
        print(f"## {name}\n\n{text}\n")


if __name__ == "__main__":
    main()
