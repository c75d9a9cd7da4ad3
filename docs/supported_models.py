"""Rewrite the README's table of supported models from the tested models (thanos/demo/tested_models.py).

python docs/supported_models.py           # rewrites README.md between the supported-models markers
python docs/supported_models.py --check   # exit status 1 if README.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thanos.demo.tested_models import BEGIN, END, readme_table

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only check that README.md is up to date")
    args = parser.parse_args()
    text = README.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{README}: no {BEGIN} ... {END} block to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + readme_table() + tail
    if args.check:
        sys.exit(0 if new == text else 1)
    README.write_text(new)
    print(f"rewrote the supported-models table of {README}")


if __name__ == "__main__":
    main()
