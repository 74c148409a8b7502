"""Runs a weir pipeline as N shards on a Ray cluster, then merges them.

    python ray_shards.py pipeline.yaml --shards 4

Each shard is a Ray task that runs `weir run PIPELINE --shard I/N --resume`
on whichever node Ray picks; Ray retries a task whose node died, and
`--resume` carries the shard on from its audit database. The nodes must share
the pipeline's folder (a shared file system). `ray.init()` joins the cluster
named by RAY_ADDRESS, or starts a local one. WEIR names the weir binary
(default: `weir` on the PATH).
"""

import argparse
import os
import subprocess
import sys

import ray


@ray.remote(max_retries=3, num_cpus=1)
def run_shard(weir: str, pipeline: str, index: int, count: int) -> int:
    done = subprocess.run(
        [weir, "run", pipeline, "--shard", f"{index}/{count}", "--resume"],
        capture_output=True,
        text=True,
    )
    # 2: finished with rows set aside (on_error); anything else is a failure.
    if done.returncode not in (0, 2):
        raise RuntimeError(f"shard {index}/{count} failed:\n{done.stderr}")
    return done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pipeline")
    parser.add_argument("--shards", type=int, required=True)
    args = parser.parse_args()
    # Ray's workers need not start in this folder: give them absolute paths.
    weir = os.environ.get("WEIR", "weir")
    weir = os.path.abspath(weir) if os.sep in weir else weir
    pipeline = os.path.abspath(args.pipeline)
    ray.init()
    shards = [run_shard.remote(weir, pipeline, i, args.shards) for i in range(args.shards)]
    codes = ray.get(shards)
    print(f"shards finished: exit codes {codes}", flush=True)
    merged = subprocess.run([weir, "merge", pipeline, "--shards", str(args.shards)])
    if merged.returncode != 0:
        return merged.returncode
    return 2 if 2 in codes else 0


if __name__ == "__main__":
    sys.exit(main())
