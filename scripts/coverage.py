"""Which standard models Phalanx loads and steps with contacts, and why the others do not.

Every MJCF of dm_control's suite, of Gymnasium's MuJoCo assets and of MuJoCo's samples (Debian's
libmujoco-samples, /usr/share/mujoco/model) and every URDF of example-robot-data is loaded with
phalanx.load_model and, when it loads, rolled out for --steps steps of zero control from qpos0
with the model's own contact and limit settings (float64, on the CPU). Each row reads

    ok        loaded and stepped; contacts seen, and the largest contact count of a step
    load      the loader refused it: its message (the first line; for MJCF MuJoCo's compiler's
              message, or from_mujoco's refusal of physics Phalanx does not simulate)
    device    it loaded but could not be prepared for the device: the message
    stopped   a step set a stopping status bit (non-finite state or result): the bits
    warning   stepped, with warning bits (contact overflow, LCP not converged): the bits

followed by a count per source. Used to track which models users can bring:

    .venv/bin/python scripts/coverage.py [--steps 100] [--source dm_control ...] [--json FILE]
"""

import argparse
import collections
import json
import re
import pathlib
import sys

import numpy as np

import phalanx
from phalanx.testing import (MUJOCO_SAMPLES, dm_control_suite_dir, example_robot_data_dir,
                             gymnasium_assets_dir)


def sources() -> dict[str, list[pathlib.Path]]:
    """the model files of each source, sorted; an absent source has none"""
    dm, gym, robots = dm_control_suite_dir(), gymnasium_assets_dir(), example_robot_data_dir()
    found = {
        "dm_control": sorted(dm.glob("*.xml")) if dm else [],
        "gymnasium": sorted(gym.glob("*.xml")) if gym else [],
        "mujoco_samples": sorted(MUJOCO_SAMPLES.rglob("*.xml")),
        "example_robot_data": sorted(robots.rglob("*.urdf")) if robots else [],
    }
    # files that only hold shared assets or defaults for <include> are not models
    return {name: [p for p in paths if not is_include_only(p)] for name, paths in found.items()}


def is_include_only(path: pathlib.Path) -> bool:
    """an MJCF fragment meant for <include> (its root is not <mujoco>, or it has no body)"""
    if path.suffix != ".xml":
        return False
    text = path.read_text(errors="replace")
    return not re.search(r"<mujoco[\s>]", text) or ("<worldbody" not in text and "<include" not in text)


def check(path: pathlib.Path, steps: int) -> dict:
    """the status of one model file, as a row of the report"""
    row = {"path": str(path)}
    try:
        model = phalanx.load_model(path)
    except Exception as e:  # the loader's refusal is the finding
        return {**row, "status": "load", "reason": first_line(e).replace(str(path), path.name)}
    row.update(nbody=model.nbody, ngeom=model.ngeom, contact=bool(model.contact))
    qpos = model.qpos0[None].astype(np.float64)
    qvel = np.zeros((1, model.nv))
    ctrl = np.zeros((1, steps, model.nu))
    counts = np.zeros((1, steps, phalanx.NUM_COUNTS), np.int32)
    try:
        act = np.zeros((1, model.na)) if model.na else None  # actuators with dynamics at rest
        status = phalanx.rollout(model, qpos, qvel, ctrl, counts=counts, act=act)[-1]
    except Exception as e:
        return {**row, "status": "device", "reason": first_line(e)}
    bits = int(status[0])
    contacts = counts[0, :, phalanx.COUNT_CONTACTS]
    row.update(contacts_seen=int(np.count_nonzero(contacts)), max_contacts=int(contacts.max()))
    if bits & phalanx.STATUS_STOP_MASK:
        return {**row, "status": "stopped", "reason": bit_names(bits)}
    if bits:
        return {**row, "status": "warning", "reason": bit_names(bits)}
    return {**row, "status": "ok", "reason": ""}


def first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def bit_names(bits: int) -> str:
    return ", ".join(name for name, bit in phalanx.STATUS_BITS if bits & bit)


def report(rows: dict[str, list[dict]]) -> str:
    lines = []
    for source, entries in rows.items():
        lines.append(f"\n{source} ({len(entries)} files)")
        for r in entries:
            name = pathlib.Path(r["path"]).name
            if r["status"] in ("ok", "warning"):
                detail = (f"{r['max_contacts']} contacts at most" if r["contact"]
                          else "contacts off in the file")
                if r["reason"]:
                    detail += f"; {r['reason']}"
            else:
                detail = r["reason"]
            lines.append(f"  {r['status']:8s} {name:40s} {detail}")
    lines.append("\nsource                 files  steps with contacts  by status")
    for source, entries in rows.items():
        tally = collections.Counter(r["status"] for r in entries)
        stepped = tally["ok"] + tally["warning"]
        lines.append(f"{source:22s} {len(entries):5d}  {stepped:19d}  " +
                     ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per rollout (100)")
    parser.add_argument("--source", nargs="*", help="only these sources")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    found = sources()
    if args.source:
        unknown = set(args.source) - set(found)
        if unknown:
            parser.error(f"unknown source(s) {sorted(unknown)}; known: {sorted(found)}")
        found = {k: v for k, v in found.items() if k in args.source}
    rows = {name: [check(p, args.steps) for p in paths] for name, paths in found.items()}
    print(report(rows).lstrip("\n"))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
