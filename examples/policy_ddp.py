"""examples/policy_shac.py's training over several processes with torch.distributed: each
process steps its own Phalanx batch, num_envs / world of the environments, and
``phalanx.learn.TorchDistributed`` averages the actor's and the critic's gradients (and merges
the observation statistics) over the processes after every backward pass, so the networks,
which start equal, stay equal.

Run it under torchrun, one process per group of cores::

    torchrun --nproc_per_node=2 examples/policy_ddp.py --task cartpole --num-envs 128

or over several machines with torchrun's ``--nnodes``, ``--node_rank`` and ``--master_addr``.
Each process draws its environments from its own generator (seed * world + rank), so P
processes of E / P environments train as one process of E would in distribution, not to the
bit. The all-reduce runs on gloo (the training's tensors are on the CPU; with CUDA, NCCL is set
up beside it for CUDA tensors). Process 0 shows the progress and the evaluation before and
after; every process writes its networks, observation statistics and evaluation returns to
``--out``/policy_ddp_<task>_rank<r>.pt (the test compares them across processes and with the
same training in threads).

    torchrun --nproc_per_node=2 examples/policy_ddp.py [--task cartpole|cheetah]
        [--iterations N] [--num-envs 64] [--seed 0] [--eval-every 25] [--out examples/out]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist

import phalanx
import phalanx.learn as pl
from policy_shac import train


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["cartpole", "cheetah"], default="cartpole")
    parser.add_argument("--iterations", type=int, default=None,
                        help="training windows (default: the task's)")
    parser.add_argument("--num-envs", type=int, default=64,
                        help="environments over all processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    phalanx.set_num_threads(threads)
    try:
        r = train(args.task, args.iterations, num_envs=args.num_envs, seed=args.seed,
                  eval_every=args.eval_every, distributed=pl.TorchDistributed(),
                  progress=rank == 0)
        agent, history = r["agent"], r["history"]
        args.out.mkdir(parents=True, exist_ok=True)
        torch.save({"actor": agent.actor.state_dict(), "policy": agent.policy.state_dict(),
                    "critic": agent.critic.state_dict(),
                    "norm": agent.norm.state_dict(), "returns": history["returns"],
                    "world": world}, args.out / f"policy_ddp_{args.task}_rank{rank}.pt")
        if rank == 0:
            print(f"{args.task} over {world} processes: evaluation return {r['initial']:.1f} -> "
                  f"{r['final']:.1f} after {history['iteration'][-1]} windows, "
                  f"{history['env_steps'][-1]:,} env-steps, {history['seconds'][-1]:.1f} s of "
                  f"training")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
