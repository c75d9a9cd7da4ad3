"""Rewrite the table of supported models in docs/supported-models.md from the tested matrix
(thanos/demo/tested_models.py).

python docs/supported_models.py           # rewrites the page between the supported-models markers
python docs/supported_models.py --check   # exit status 1 if docs/supported-models.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thanos.demo.tested_models import BEGIN, END, readme_table

PAGE = Path(__file__).resolve().parent / "supported-models.md"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help=f"only check that {PAGE.name} is up to date")
    args = parser.parse_args()
    text = PAGE.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{PAGE}: no {BEGIN} ... {END} block to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + readme_table() + tail
    if args.check:
        sys.exit(0 if new == text else 1)
    PAGE.write_text(new)
    print(f"rewrote the supported-models table of {PAGE}")


if __name__ == "__main__":
    main()
