"""The policy training of policy_apg.py across processes with torch.distributed: each process
steps its own Phalanx batch, a slice of the environments, and DistributedDataParallel averages
the policy's and the critic's gradients over the processes after every backward pass.

Run it under torchrun, one process per group of cores (gloo) or per GPU (NCCL)::

    torchrun --nproc_per_node=2 examples/policy_ddp.py --task cartpole --envs 128

or over several machines with torchrun's ``--nnodes``, ``--node_rank`` and ``--master_addr``.
With E environments over P processes each process steps E / P of them, drawn as the training in
one process would draw all E; as the loss is the mean over the environments, the averaged
gradient is the one-process gradient (up to the order of the sums), so P processes train the
policy one process would, in less time per iteration when the simulation dominates. Process 0
prints the progress and the evaluation; every process writes its final parameters to
``--out``/policy_ddp_<task>_rank<r>.pt (the test compares them with a one-process run).

    torchrun --nproc_per_node=2 examples/policy_ddp.py [--task cartpole|cheetah]
        [--iterations N] [--envs E] [--seed 0] [--out examples/out]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import phalanx
from policy_apg import describe, train


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["cartpole", "cheetah"], default="cartpole")
    parser.add_argument("--iterations", type=int, default=None,
                        help="training windows (default: the task's)")
    parser.add_argument("--envs", type=int, default=None,
                        help="environments over all processes (default: the task's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    phalanx.set_num_threads(threads)
    try:
        result = train(args.task, args.iterations, seed=args.seed, envs=args.envs,
                       eval_every=args.eval_every, log=print if rank == 0 else None,
                       rank=rank, world=world, wrap=DistributedDataParallel)
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"policy_ddp_{args.task}_rank{rank}.pt"
        torch.save({"policy": result["policy"].module.state_dict(), "returns": result["returns"],
                    "seconds": result["seconds"], "world": world}, path)
        if rank == 0:
            print(f"{args.task} over {world} processes: evaluation {result['initial']:+.4f} -> "
                  f"{result['final']:+.4f} in {result['iterations'][-1]} iterations "
                  f"({result['seconds']:.1f} s); {describe(result)}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
