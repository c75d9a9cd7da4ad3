"""Build the offline demo data: Wikipedia articles from the gensim 4.4.0 wheel (fetched once from PyPI,
verified by sha256), split by article into train/calib/test jsonl, plus the lm-eval task
``demo_wordorder`` under tasks/ and a manifest.json with counts and checksums. Text: CC BY-SA."""

from __future__ import annotations

import argparse
import logging
import os
import time
from importlib.metadata import version
from pathlib import Path

from thanos.demo.splits import CALIB_FRACTION, TEST_FRACTION
from thanos.files.atomic import write_json

HELP = "build the demo data (Wikipedia sample dump -> train/calib/test jsonl + lm-eval task)"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-dir", required=True, type=Path, help="output directory (e.g. results/demo/data)"
    )
    parser.add_argument(
        "--wheel",
        type=Path,
        default=os.environ.get("THANOS_GENSIM_WHEEL") or None,
        help="local copy of the gensim 4.4.0 wheel, checked against its sha256"
        " (default: $THANOS_GENSIM_WHEEL,"
        " else fetched with pip into OUT_DIR/_cache once)",
    )
    parser.add_argument("--seed", type=int, default=0, help="split and task seed (default 0)")
    parser.add_argument(
        "--test-fraction", type=float, default=TEST_FRACTION, help="share of articles for test (%(default)s)"
    )
    parser.add_argument(
        "--calib-fraction",
        type=float,
        default=CALIB_FRACTION,
        help="share of articles for calib (%(default)s)",
    )
    parser.add_argument("--task-docs", type=int, default=300, help="max documents of demo_wordorder")


def run(args: argparse.Namespace) -> None:
    from thanos.demo import splits, tasks, wikidump

    start = time.perf_counter()
    out_dir: Path = args.out_dir
    if args.wheel is not None:
        wheel = args.wheel
        wheel_sha = wikidump.verify_wheel(wheel)
    else:
        wheel = wikidump.fetch_wheel(out_dir / "_cache")
        wheel_sha = wikidump.WHEEL_SHA256
    dump = wikidump.read_dump(wheel)
    log.info("extracting articles from %s", wikidump.DUMP_MEMBER.rsplit("/", 1)[-1])
    articles = wikidump.extract_articles(dump)
    parts = splits.split_articles(articles, args.seed, args.test_fraction, args.calib_fraction)
    out_dir.mkdir(parents=True, exist_ok=True)
    stats = {}
    for name, subset in parts.items():
        path = out_dir / f"{name}.jsonl"
        splits.write_jsonl(path, subset)
        stats[name] = splits.split_stats(path, subset)
        log.info("%s: %d articles, %d words -> %s", name, len(subset), stats[name]["words"], path)
    docs = tasks.build_docs(parts["test"], seed=args.seed, max_docs=args.task_docs)
    task_dir = tasks.write_task(out_dir / "tasks", docs)
    log.info("task %s: %d documents -> %s", tasks.TASK_NAME, len(docs), task_dir)
    manifest = {
        "source": {
            "package": f"gensim=={wikidump.GENSIM_VERSION}",
            "wheel": Path(wheel).name,
            "wheel_sha256": wheel_sha,
            "platform": wikidump.PLATFORM,
            "python_version": wikidump.PYTHON_VERSION,
            "member": wikidump.DUMP_MEMBER,
            "member_sha256": wikidump.DUMP_SHA256,
            "license": wikidump.LICENSE,
        },
        "articles": len(articles),
        "seed": args.seed,
        "fractions": {"test": args.test_fraction, "calib": args.calib_fraction},
        "splits": stats,
        "task": {
            "name": tasks.TASK_NAME,
            "version": tasks.TASK_VERSION,
            "include_path": "tasks",
            "docs": len(docs),
            "choices": tasks.NUM_CHOICES,
            "source_split": "test",
        },
        "versions": {pkg: version(pkg) for pkg in ("mwxml", "mwparserfromhell")},
        "seconds": round(time.perf_counter() - start, 2),
    }
    write_json(out_dir / "manifest.json", manifest)
    log.info("wrote %s", out_dir / "manifest.json")
