"""Mesh-heavy scenes: Phalanx float32 against MuJoCo in one run, on the same cores.

Two scenes, written below as MJCF and compiled by MuJoCo; Phalanx takes MuJoCo's compiled model
(phalanx.from_mujoco), so both simulate the same hulls, inertias and frames:

- pile: 20 free bodies, each a convex mesh (icosahedron, box, hexagonal prism, a 30-point random
  hull), dropped from a grid into a walled bin, so that they land on each other;
- terrain: a four-legged robot whose feet are icosahedron meshes, walking with random controls on
  a 64 x 64 height field of smooth bumps.

E environments by T steps from the model's initial state, both cores: Phalanx through
phalanx.rollout, MuJoCo through mujoco.rollout with one MjData per thread. Reports env-steps/s
(median of the repeats) and their ratio, contacts per step, the GJK and EPA iterations per step
(summed over the convex pairs), and memory per environment.

    .venv/bin/python bench/bench_mesh.py [--envs 1024] [--steps 500] [--repeats 3]
"""

import platform

import mujoco
import numpy as np

import phalanx
from _common import parse_args, race, write_result


def icosahedron(radius):
    t = (1 + 5 ** 0.5) / 2
    v = np.array([[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t],
                  [0, -1, -t], [0, 1, -t], [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]], float)
    return radius * v / np.linalg.norm(v[0])


def box(half):
    return np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float) * half


def hex_prism(radius, half_height):
    a = np.arange(6) * np.pi / 3
    ring = np.stack([radius * np.cos(a), radius * np.sin(a)], axis=1)
    return np.concatenate([np.c_[ring, np.full(6, -half_height)],
                           np.c_[ring, np.full(6, half_height)]])


def random_hull(radius, n, rng):
    p = rng.normal(size=(n, 3))
    return radius * p / np.linalg.norm(p, axis=1, keepdims=True) * rng.uniform(0.7, 1.0, (n, 1))


def mesh_asset(name, verts):
    return f'<mesh name="{name}" vertex="{" ".join(f"{x:.6f}" for x in verts.ravel())}"/>'


def pile_xml(rng):
    meshes = {"ico": icosahedron(0.08), "box": box(np.array([0.07, 0.05, 0.04])),
              "hex": hex_prism(0.07, 0.04), "rock": random_hull(0.08, 30, rng)}
    names = list(meshes)
    bodies = []
    for i in range(20):
        x, y, z = (i % 3 - 1) * 0.2, (i // 3 % 3 - 1) * 0.2, 0.15 + 0.2 * (i // 9)
        x, y = x + rng.uniform(-0.02, 0.02), y + rng.uniform(-0.02, 0.02)
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        bodies.append(f'<body pos="{x} {y} {z}" quat="{q[0]} {q[1]} {q[2]} {q[3]}"><freejoint/>'
                      f'<geom type="mesh" mesh="{names[i % 4]}" density="800"/></body>')
    walls = "".join(f'<geom type="plane" size="0.4 0.4 0.01" pos="{px} {py} 0.2" zaxis="{zx} {zy} 0"/>'
                    for px, py, zx, zy in [(0.35, 0, -1, 0), (-0.35, 0, 1, 0), (0, 0.35, 0, -1),
                                           (0, -0.35, 0, 1)])
    return (f'<mujoco model="mesh pile"><option timestep="0.002"/><asset>'
            f'{"".join(mesh_asset(k, v) for k, v in meshes.items())}</asset><worldbody>'
            f'<geom type="plane" size="1 1 0.01"/>{walls}{"".join(bodies)}</worldbody></mujoco>')


def terrain_xml(rng):
    n = 64
    x = np.linspace(-1, 1, n)
    xx, yy = np.meshgrid(x, x)
    bumps = sum(rng.uniform(0.2, 1) * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 0.05)
                for cx, cy in rng.uniform(-1, 1, (12, 2)))
    elevation = bumps / bumps.max()
    legs = []
    for k, (sx, sy) in enumerate([(1, 1), (-1, 1), (-1, -1), (1, -1)]):
        legs.append(
            f'<body pos="{0.15 * sx} {0.1 * sy} 0"><joint name="hip{k}" type="hinge" axis="0 1 0" '
            f'range="-60 60"/><geom type="capsule" fromto="0 0 0 {0.1 * sx} 0 -0.1" size="0.02"/>'
            f'<body pos="{0.1 * sx} 0 -0.1"><joint name="knee{k}" type="hinge" axis="0 1 0" '
            f'range="-60 60"/><geom type="capsule" fromto="0 0 0 0 0 -0.12" size="0.02"/>'
            f'<geom type="mesh" mesh="foot" pos="0 0 -0.12"/></body></body>')
    motors = "".join(f'<motor joint="{j}{k}" gear="20" ctrlrange="-1 1"/>'
                     for k in range(4) for j in ("hip", "knee"))
    return (f'<mujoco model="legged robot on a height field"><option timestep="0.002"/>'
            f'<asset>{mesh_asset("foot", icosahedron(0.035))}<hfield name="terrain" nrow="{n}" '
            f'ncol="{n}" size="3 3 0.15 0.1" elevation="{" ".join(f"{e:.5f}" for e in elevation.ravel())}"/>'
            f'</asset><worldbody><geom type="hfield" hfield="terrain"/>'
            f'<body pos="0 0 0.45"><freejoint/><geom type="box" size="0.2 0.12 0.05"/>'
            f'{"".join(legs)}</body></worldbody><actuator>{motors}</actuator></mujoco>')


def run_scene(name, xml, args, rng):
    mj_model = mujoco.MjModel.from_xml_string(xml)
    model = phalanx.from_mujoco(mj_model)
    ctrl = rng.uniform(-1.0, 1.0, size=(args.envs, args.steps, model.nu))
    median, rate, stats, flags = race(name, model, mj_model, ctrl, args)
    return {
        "scene": name,
        "ngeom": model.ngeom,
        "nmesh": model.nmesh,
        "median_seconds": median,
        "env_steps_per_second": rate,
        "ratio_float32_vs_mujoco": rate["phalanx_float32"] / rate["mujoco"],
        "contacts_per_step": stats["contacts"],
        "lcp_rows_per_step": stats["rows"],
        "contacts_over_capacity_per_step": stats["overflow"],
        "gjk_iterations_per_step": stats["gjk_iterations"],
        "epa_iterations_per_step": stats["epa_iterations"],
        "ccd_iterations_bound": model.ccd_iterations,
        "status_bits_seen": flags,
        "bytes_per_env_float32": phalanx.bytes_per_env(model, dtype=np.float32),
    }


def main():
    args = parse_args(__doc__.splitlines()[0], "mesh.json", envs=1024, steps=500)
    rng = np.random.default_rng(0)
    scenes = [run_scene("pile", pile_xml(rng), args, rng),
              run_scene("terrain", terrain_xml(rng), args, rng)]
    print()
    print(f"mesh scenes, {args.envs} envs x {args.steps} steps, {args.threads} threads, "
          f"median of {args.repeats}")
    for s in scenes:
        r = s["env_steps_per_second"]
        print(f"  {s['scene']:8s} phalanx float32 {r['phalanx_float32']:>12,.0f}  mujoco "
              f"{r['mujoco']:>12,.0f} env-steps/s  ratio {s['ratio_float32_vs_mujoco']:.2f}x  "
              f"contacts/step {s['contacts_per_step']:.1f}  overflow/step "
              f"{s['contacts_over_capacity_per_step']:.2f}  GJK/EPA iterations/step "
              f"{s['gjk_iterations_per_step']:.0f}/{s['epa_iterations_per_step']:.0f}  "
              f"{s['bytes_per_env_float32'] / 1024:.1f} KiB/env")
    write_result({"benchmark": "mesh scenes", "envs": args.envs, "steps": args.steps,
                  "threads": args.threads, "repeats": args.repeats,
                  "machine": platform.processor() or platform.machine(), "scenes": scenes},
                 args.out)


if __name__ == "__main__":
    main()
