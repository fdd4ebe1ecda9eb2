"""Self-contained HTML pages that play Phalanx trajectories in 3-D: ``phalanx.viewer.html``.

    import phalanx, phalanx.viewer
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)        # (E, T, nq)
    phalanx.viewer.html(model, qs, path="rollout.html", dt=model.timestep)

The page draws every geom type Phalanx collides (planes, spheres, capsules, boxes, cylinders,
ellipsoids, the convex hulls of meshes, height fields) with three.js, which is inlined from
Debian's libjs-three (``/usr/share/javascript/three``), so the page needs no network. It has a
time slider, play and pause, and orbit, pan and zoom with the mouse. Several environments
(qpos of shape (E, T, nq)) are laid out in a grid; ``contacts=True`` marks the contact points
Phalanx detects at each frame. The body frames are Phalanx's kinematics of each frame's qpos;
three.js places the geoms in them.

From the command line: ``phalanx view MODEL [--traj FILE.npz] [--out FILE.html]`` (the .npz
holds ``qpos`` (T, nq) or (E, T, nq) and optionally ``dt``).

For tests and scripts the page exposes ``window.phalanxViewer``: ``setFrame(t)``, ``frame()``,
``frames`` and ``project(env, body, point)`` (the pixel of a point given in a body's frame).
"""

from __future__ import annotations

import base64
import html as html_escape
import json
import os
from pathlib import Path

import numpy as np

from . import _phalanx

THREE_DIR = Path(os.environ.get("PHALANX_THREE_DIR", "/usr/share/javascript/three"))
# body colours (unlit with lighting=False, so that a screenshot shows them exactly)
PALETTE = [0x4C72B0, 0xDD8452, 0x55A868, 0xC44E52, 0x8172B3, 0x937860, 0xDA8BC3, 0x8C8C8C,
           0xCCB974, 0x64B5CD]
BACKGROUND = 0xF2F2F2
STATIC = 0xB0B0B0  # geoms of the world body


def _three_sources() -> str:
    files = [THREE_DIR / "build" / "three.min.js",
             THREE_DIR / "examples" / "js" / "controls" / "OrbitControls.js"]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(
            f"phalanx.viewer: three.js not found ({', '.join(map(str, missing))}); install "
            f"Debian's libjs-three or set PHALANX_THREE_DIR to a three.js r111 tree")
    return "\n".join(f.read_text() for f in files)


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, np.float32).tobytes()).decode()


def _states(model, qpos) -> np.ndarray:
    q = np.asarray(qpos, np.float64)
    if q.ndim == 1:
        q = q[None, None]
    elif q.ndim == 2:
        q = q[None]
    if q.ndim != 3 or q.shape[-1] != model.nq or q.shape[1] == 0 or q.shape[0] == 0:
        raise ValueError(f"phalanx.viewer: qpos must have shape (nq,), (T, nq) or (E, T, nq) with "
                         f"nq = {model.nq}, got {np.shape(qpos)}")
    if not np.isfinite(q).all():
        raise ValueError("phalanx.viewer: qpos holds NaN or inf")
    return q


def _geoms(model) -> list[dict]:
    """each geom's body, type, size and pose in its body, and its mesh hull or height field"""
    types = [_phalanx.GEOM_TYPES[t] for t in np.asarray(model.geom_type).reshape(-1)]
    body = np.asarray(model.geom_bodyid).reshape(-1)
    size = np.asarray(model.geom_size, np.float64).reshape(-1, 3)
    pos = np.asarray(model.geom_pos, np.float64).reshape(-1, 3)
    quat = np.asarray(model.geom_quat, np.float64).reshape(-1, 4)
    dataid = np.asarray(model.geom_dataid).reshape(-1)
    out = []
    for g, kind in enumerate(types):
        geom = {"body": int(body[g]), "type": kind, "size": size[g].tolist(),
                "pos": pos[g].tolist(), "quat": quat[g].tolist()}
        if kind == "mesh":
            geom["mesh"] = _hull(model, int(dataid[g]))
        elif kind == "hfield":
            geom["hfield"] = _hfield(model, int(dataid[g]))
        out.append(geom)
    return out


def _hull(model, m: int) -> dict:
    adr = int(np.asarray(model.mesh_vertadr).reshape(-1)[m])
    num = int(np.asarray(model.mesh_vertnum).reshape(-1)[m])
    verts = np.asarray(model.mesh_vert, np.float64).reshape(-1, 3)[adr:adr + num]
    padr = int(np.asarray(model.mesh_polyadr).reshape(-1)[m])
    pnum = int(np.asarray(model.mesh_polynum).reshape(-1)[m])
    vadr = np.asarray(model.mesh_polyvertadr).reshape(-1)
    vnum = np.asarray(model.mesh_polyvertnum).reshape(-1)
    polyvert = np.asarray(model.mesh_polyvert).reshape(-1)
    faces = [polyvert[vadr[f]:vadr[f] + vnum[f]].tolist() for f in range(padr, padr + pnum)]
    return {"verts": verts.ravel().tolist(), "faces": faces}


def _hfield(model, h: int) -> dict:
    nrow = int(np.asarray(model.hfield_nrow).reshape(-1)[h])
    ncol = int(np.asarray(model.hfield_ncol).reshape(-1)[h])
    adr = int(np.asarray(model.hfield_adr).reshape(-1)[h])
    size = np.asarray(model.hfield_size, np.float64).reshape(-1, 4)[h]
    data = np.asarray(model.hfield_data, np.float64).reshape(-1)[adr:adr + nrow * ncol]
    return {"nrow": nrow, "ncol": ncol, "size": size.tolist(), "data": _b64(data)}


def html(model, qpos, path=None, *, dt: float | None = None, contacts: bool = False,
         spacing: float | None = None, camera: dict | None = None, lighting: bool = True,
         title: str = "Phalanx") -> str:
    """The page that plays qpos ((nq,), (T, nq) or (E, T, nq)) of ``model`` (a phalanx.Model or
    a path), frame t at time t * dt (default: the model's timestep). Returns the HTML text and,
    with ``path``, writes it there. ``spacing`` is the distance between environments in the
    grid (default: from the bodies' extent); ``camera`` = {"pos": (x, y, z), "target": (x, y,
    z), "fov": degrees} places the initial view (default: the whole grid in sight);
    ``lighting=False`` draws every geom in its flat colour."""
    import phalanx

    if isinstance(model, (str, os.PathLike)):
        model = phalanx.load_model(model)
    q = _states(model, qpos)
    E, T, nq = q.shape
    flat = q.reshape(E * T, nq)
    kin = phalanx.kinematics(model, flat)
    nbody = model.nbody
    xpos = kin["xpos"].reshape(E, T, nbody, 3)
    # the grid: environments side by side, rows of ceil(sqrt(E))
    extent = xpos[..., :2].max(axis=(1, 2)) - xpos[..., :2].min(axis=(1, 2))
    if spacing is None:
        spacing = max(1.0, 1.5 * float(extent.max()))
    side = int(np.ceil(np.sqrt(E)))
    offsets = [[(e % side) * spacing, -(e // side) * spacing, 0.0] for e in range(E)]
    if camera is None:
        world = xpos.reshape(E, -1, 3) + np.asarray(offsets)[:, None]
        low, high = world.reshape(-1, 3).min(0), world.reshape(-1, 3).max(0)
        centre = (low + high) / 2
        radius = max(0.5, float(np.linalg.norm(high - low)) / 2)
        direction = np.array([1.0, -1.6, 0.9]) / np.linalg.norm([1.0, -1.6, 0.9])
        camera = {"pos": (centre + 2.6 * radius * direction).tolist(),
                  "target": centre.tolist(), "fov": 45}
    data = {
        "title": title, "envs": E, "frames": T, "nbody": nbody,
        "dt": float(model.timestep if dt is None else dt),
        "geoms": _geoms(model), "xpos": _b64(kin["xpos"]), "xquat": _b64(kin["xquat"]),
        "offsets": offsets, "camera": {k: (list(map(float, v)) if k != "fov" else float(v))
                                       for k, v in camera.items()},
        "lighting": bool(lighting), "palette": PALETTE, "background": BACKGROUND,
        "static": STATIC,
    }
    if contacts:
        found = phalanx.contacts(model, flat)
        count, points = found["count"], found["pos"]
        keep = int(count.max(initial=0))
        data["contacts"] = {"count": count.astype(int).tolist(), "max": keep,
                            "points": _b64(points[:, :keep])}
    page = _TEMPLATE.replace("@TITLE@", html_escape.escape(title)).replace(
        "@THREE@", _three_sources()).replace(
        "@DATA@", json.dumps(data).replace("</", "<\\/")).replace("@VIEWER@", _VIEWER_JS)
    if path is not None:
        Path(path).write_text(page)
    return page


_TEMPLATE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>@TITLE@</title>
<style>
html, body { margin: 0; height: 100%; overflow: hidden; font: 13px sans-serif; }
#bar { position: absolute; left: 0; right: 0; bottom: 0; display: flex; gap: 8px;
       align-items: center; padding: 6px 10px; background: rgba(255,255,255,0.85); }
#slider { flex: 1; }
</style></head>
<body>
<div id="bar"><button id="play">play</button><input id="slider" type="range" min="0" value="0">
<span id="label"></span></div>
<script>@THREE@</script>
<script id="phx-data" type="application/json">@DATA@</script>
<script>@VIEWER@</script>
</body></html>
"""

_VIEWER_JS = r"""
(function () {
  const D = JSON.parse(document.getElementById("phx-data").textContent);
  function floats(b64) {
    const s = atob(b64), bytes = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
    return new Float32Array(bytes.buffer);
  }
  const E = D.envs, T = D.frames, NB = D.nbody;
  const xpos = floats(D.xpos), xquat = floats(D.xquat);
  const renderer = new THREE.WebGLRenderer({antialias: true, preserveDrawingBuffer: true});
  renderer.setPixelRatio(1);
  document.body.insertBefore(renderer.domElement, document.body.firstChild);
  const scene = new THREE.Scene();
  scene.background = new THREE.Color(D.background);
  const camera = new THREE.PerspectiveCamera(D.camera.fov, 1, 0.01, 2000);
  camera.up.set(0, 0, 1);
  camera.position.fromArray(D.camera.pos);
  const controls = new THREE.OrbitControls(camera, renderer.domElement);
  controls.target.fromArray(D.camera.target);
  if (D.lighting) {
    scene.add(new THREE.HemisphereLight(0xffffff, 0x606060, 0.75));
    const sun = new THREE.DirectionalLight(0xffffff, 0.55);
    sun.position.set(3, -4, 8);
    scene.add(sun);
  }
  function material(color) {
    return D.lighting ? new THREE.MeshLambertMaterial({color: color, side: THREE.DoubleSide})
                      : new THREE.MeshBasicMaterial({color: color, side: THREE.DoubleSide});
  }
  function alongZ(geometry) { geometry.rotateX(Math.PI / 2); return geometry; }
  function shape(g, mat) {
    const s = g.size;
    switch (g.type) {
      case "plane": {
        const w = s[0] > 0 ? 2 * s[0] : 40, h = s[1] > 0 ? 2 * s[1] : 40;
        return new THREE.Mesh(new THREE.PlaneGeometry(w, h), mat);
      }
      case "sphere": return new THREE.Mesh(new THREE.SphereGeometry(s[0], 24, 16), mat);
      case "ellipsoid": {
        const m = new THREE.Mesh(new THREE.SphereGeometry(1, 24, 16), mat);
        m.scale.set(s[0], s[1], s[2]);
        return m;
      }
      case "capsule": {
        const group = new THREE.Group();
        group.add(new THREE.Mesh(alongZ(new THREE.CylinderGeometry(s[0], s[0], 2 * s[1], 20)), mat));
        for (const z of [-s[1], s[1]]) {
          const cap = new THREE.Mesh(new THREE.SphereGeometry(s[0], 20, 12), mat);
          cap.position.z = z;
          group.add(cap);
        }
        return group;
      }
      case "cylinder":
        return new THREE.Mesh(alongZ(new THREE.CylinderGeometry(s[0], s[0], 2 * s[1], 24)), mat);
      case "box": return new THREE.Mesh(new THREE.BoxGeometry(2 * s[0], 2 * s[1], 2 * s[2]), mat);
      case "mesh": {
        const index = [];
        for (const f of g.mesh.faces)
          for (let k = 1; k + 1 < f.length; k++) index.push(f[0], f[k], f[k + 1]);
        const geometry = new THREE.BufferGeometry();
        geometry.setAttribute("position", new THREE.Float32BufferAttribute(g.mesh.verts, 3));
        geometry.setIndex(index);
        geometry.computeVertexNormals();
        return new THREE.Mesh(geometry, mat);
      }
      case "hfield": {
        const h = g.hfield, z = floats(h.data), verts = [], index = [];
        for (let r = 0; r < h.nrow; r++)
          for (let c = 0; c < h.ncol; c++)
            verts.push((2 * c / (h.ncol - 1) - 1) * h.size[0], (2 * r / (h.nrow - 1) - 1) * h.size[1],
                       z[r * h.ncol + c] * h.size[2]);  // elevations in [0, 1] times the height
        for (let r = 0; r + 1 < h.nrow; r++)
          for (let c = 0; c + 1 < h.ncol; c++) {
            const a = r * h.ncol + c;
            index.push(a, a + 1, a + h.ncol + 1, a, a + h.ncol + 1, a + h.ncol);
          }
        const geometry = new THREE.BufferGeometry();
        geometry.setAttribute("position", new THREE.Float32BufferAttribute(verts, 3));
        geometry.setIndex(index);
        geometry.computeVertexNormals();
        return new THREE.Mesh(geometry, mat);
      }
    }
    return new THREE.Group();
  }
  // a group per environment and body; geoms sit in their body's frame
  const roots = [], bodies = [], marks = [];
  const contactMaterial = new THREE.MeshBasicMaterial({color: 0xff0000});
  for (let e = 0; e < E; e++) {
    const root = new THREE.Group();
    root.position.fromArray(D.offsets[e]);
    scene.add(root);
    roots.push(root);
    const groups = [];
    for (let b = 0; b < NB; b++) { const group = new THREE.Group(); root.add(group); groups.push(group); }
    for (const g of D.geoms) {
      const color = g.body === 0 ? D.static : D.palette[g.body % D.palette.length];
      const object = shape(g, material(color));
      const holder = new THREE.Group();
      holder.position.fromArray(g.pos);
      holder.quaternion.set(g.quat[1], g.quat[2], g.quat[3], g.quat[0]);
      holder.add(object);
      groups[g.body].add(holder);
    }
    bodies.push(groups);
    const mine = [];
    if (D.contacts)
      for (let k = 0; k < D.contacts.max; k++) {
        const m = new THREE.Mesh(new THREE.SphereGeometry(0.015, 10, 8), contactMaterial);
        m.visible = false;
        root.add(m);
        mine.push(m);
      }
    marks.push(mine);
  }
  const points = D.contacts ? floats(D.contacts.points) : null;
  const slider = document.getElementById("slider"), label = document.getElementById("label");
  const play = document.getElementById("play");
  slider.max = T - 1;
  let frame = 0, playing = false, last = null, clock = 0;
  function render() { controls.update(); renderer.render(scene, camera); }
  function setFrame(t) {
    frame = Math.max(0, Math.min(T - 1, Math.round(t)));
    for (let e = 0; e < E; e++) {
      for (let b = 0; b < NB; b++) {
        const i = (e * T + frame) * NB + b;
        bodies[e][b].position.set(xpos[3 * i], xpos[3 * i + 1], xpos[3 * i + 2]);
        bodies[e][b].quaternion.set(xquat[4 * i + 1], xquat[4 * i + 2], xquat[4 * i + 3], xquat[4 * i]);
      }
      if (D.contacts) {
        const s = e * T + frame, n = D.contacts.count[s];
        marks[e].forEach(function (m, k) {
          m.visible = k < n;
          if (k < n) { const j = (s * D.contacts.max + k) * 3; m.position.set(points[j], points[j + 1], points[j + 2]); }
        });
      }
    }
    slider.value = frame;
    label.textContent = "t = " + (frame * D.dt).toFixed(3) + " s (" + (frame + 1) + " / " + T + ")";
    render();
  }
  function resize() {
    renderer.setSize(window.innerWidth, window.innerHeight);
    camera.aspect = window.innerWidth / window.innerHeight;
    camera.updateProjectionMatrix();
    render();
  }
  function tick(now) {
    if (!playing) return;
    if (last !== null) clock += (now - last) / 1000;
    last = now;
    const t = Math.floor(clock / D.dt);
    if (t >= T) { clock = 0; setFrame(0); } else if (t !== frame) setFrame(t);
    requestAnimationFrame(tick);
  }
  play.onclick = function () {
    playing = !playing;
    play.textContent = playing ? "pause" : "play";
    last = null;
    clock = frame * D.dt;
    if (playing) requestAnimationFrame(tick);
  };
  slider.oninput = function () { playing = false; play.textContent = "play"; setFrame(+slider.value); };
  controls.addEventListener("change", function () { renderer.render(scene, camera); });
  window.addEventListener("resize", resize);
  window.phalanxViewer = {
    setFrame: setFrame, frame: function () { return frame; }, frames: T,
    project: function (e, b, point) {
      const v = new THREE.Vector3().fromArray(point || [0, 0, 0]);
      scene.updateMatrixWorld();
      bodies[e][b].localToWorld(v);
      v.project(camera);
      return [(v.x + 1) / 2 * window.innerWidth, (1 - v.y) / 2 * window.innerHeight];
    },
  };
  resize();
  setFrame(0);
})();
"""
