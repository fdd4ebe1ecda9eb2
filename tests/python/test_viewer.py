"""phalanx.viewer: pages opened in a real headless browser (Debian's chromium through its
chromedriver and Selenium), their screenshots held to the poses.

The pages are drawn unlit (lighting=False), so every body shows its palette colour exactly; the
expected pixel of a point is computed here, independently of three.js, by a pinhole projection
with the page's camera (position, target, vertical field of view, z up).
"""

from __future__ import annotations

import io
import json
import os
import re

import numpy as np
import pytest

import phalanx
import phalanx.viewer
from phalanx import cli

webdriver = pytest.importorskip("selenium.webdriver")
Image = pytest.importorskip("PIL.Image")

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HUMANOID = "/usr/share/mujoco/model/humanoid/humanoid.xml"
CAMERA = {"pos": (0.0, -4.0, 1.1), "target": (0.0, 0.0, 1.0), "fov": 45.0}


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--use-gl=angle",
                "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
                "--disable-dev-shm-usage", "--window-size=900,700"]:
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    yield driver
    driver.quit()


def _open(browser, path):
    browser.get(f"file://{path}")
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    assert browser.execute_script("return window.phalanxViewer.frames") >= 1


def _screenshot(browser) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB"))


def _pixel(browser, point) -> np.ndarray:
    """the pixel (column, row) of a world point seen by CAMERA in the browser's window"""
    return _pixel_of(browser, point, CAMERA)


def _pixel_of(browser, point, camera) -> np.ndarray:
    """the pixel (column, row) of a world point seen by a camera (pos, target, fov)"""
    w, h = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    eye, target = np.asarray(camera["pos"]), np.asarray(camera["target"])
    back = (eye - target) / np.linalg.norm(eye - target)          # camera's +z
    right = np.cross([0.0, 0.0, 1.0], back)
    right /= np.linalg.norm(right)
    up = np.cross(back, right)
    d = np.asarray(point) - eye
    x, y, z = d @ right, d @ up, d @ back
    f = 1 / np.tan(np.radians(camera["fov"]) / 2)
    ndc = np.array([f * x / (-z) / (w / h), f * y / (-z)])
    return np.array([(ndc[0] + 1) / 2 * w, (1 - ndc[1]) / 2 * h])


def _colour(model, body) -> np.ndarray:
    c = phalanx.viewer.PALETTE[body % len(phalanx.viewer.PALETTE)]
    return np.array([(c >> 16) & 255, (c >> 8) & 255, c & 255])


def _geom_centre(model, qpos, g):
    """the world position of geom g's centre at qpos"""
    kin = phalanx.kinematics(model, qpos[None])
    b = int(np.asarray(model.geom_bodyid).reshape(-1)[g])
    local = np.asarray(model.geom_pos, np.float64).reshape(-1, 3)[g]
    return kin["xpos"][0, b] + kin["xmat"][0, b] @ local


def _assert_drawn(image, pixel, colour, radius=2):
    """the pixels within `radius` of `pixel` show `colour`"""
    c, r = np.round(pixel).astype(int)
    patch = image[r - radius:r + radius + 1, c - radius:c + radius + 1].reshape(-1, 3)
    assert np.abs(patch.astype(int) - colour).max() <= 3, (pixel, patch[:4], colour)


def test_humanoid_head_is_where_its_pose_puts_it(browser, tmp_path):
    """frame 0: the humanoid at its reference pose; frame 1: moved 0.7 m along x and turned.
    The head's pixel is the head's colour at each frame, and moving the slider moves it."""
    model = phalanx.load_model(HUMANOID)
    head = model.body_id("head")
    g = int(np.flatnonzero(np.asarray(model.geom_bodyid).reshape(-1) == head)[0])
    q0 = np.asarray(model.qpos0, np.float64).copy()
    q1 = q0.copy()
    q1[0] += 0.7
    q1[3:7] = [np.cos(0.3), 0.0, 0.0, np.sin(0.3)]  # 0.6 rad about z
    path = tmp_path / "humanoid.html"
    phalanx.viewer.html(model, np.stack([q0, q1]), path, camera=CAMERA, lighting=False)
    _open(browser, path)
    colour = _colour(model, head)

    first = _pixel(browser, _geom_centre(model, q0, g))
    second = _pixel(browser, _geom_centre(model, q1, g))
    assert np.linalg.norm(second - first) > 50  # the move is visible
    np.testing.assert_allclose(browser.execute_script(
        "return window.phalanxViewer.project(0, arguments[0], arguments[1])", head,
        np.asarray(model.geom_pos).reshape(-1, 3)[g].tolist()), first, atol=1.0)
    image = _screenshot(browser)
    _assert_drawn(image, first, colour)
    assert np.abs(image[int(second[1]), int(second[0])].astype(int) - colour).max() > 30

    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.find_element(By.ID, "slider").send_keys(Keys.ARROW_RIGHT)  # the user's slider
    assert browser.execute_script("return window.phalanxViewer.frame()") == 1
    image = _screenshot(browser)
    _assert_drawn(image, second, colour)
    assert np.abs(image[int(first[1]), int(first[0])].astype(int) - colour).max() > 30


EVERY_GEOM = """<mujoco><asset>
  <mesh name="tetra" vertex="0 0 0  .3 0 0  0 .3 0  0 0 .3"/>
  <hfield name="hill" nrow="3" ncol="3" size=".3 .3 .1 .05" elevation="0 0 0 0 1 0 0 0 0"/>
</asset><worldbody>
  <geom type="plane" size="3 3 .1" pos="0 0 -0.5"/>
  <body name="sphere" pos="-1.5 0 1"><freejoint/><geom type="sphere" size=".15"/></body>
  <body name="capsule" pos="-1 0 1"><freejoint/><geom type="capsule" size=".1 .2"/></body>
  <body name="box" pos="-.5 0 1"><freejoint/><geom type="box" size=".15 .1 .2"/></body>
  <body name="cylinder" pos="0 0 1"><freejoint/><geom type="cylinder" size=".12 .2"/></body>
  <body name="ellipsoid" pos=".5 0 1"><freejoint/><geom type="ellipsoid" size=".2 .1 .15"/></body>
  <body name="mesh" pos="1 0 1"><freejoint/><geom type="mesh" mesh="tetra"/></body>
  <body name="hfield" pos="1.5 0 .9"><geom type="hfield" hfield="hill"/></body>
</worldbody></mujoco>"""


def test_every_geom_type_is_drawn(browser, tmp_path):
    """a plane, sphere, capsule, box, cylinder, ellipsoid, mesh hull and height field, each on
    its own body: the pixel of a point inside each shows its body's colour"""
    xml = tmp_path / "geoms.xml"
    xml.write_text(EVERY_GEOM)
    model = phalanx.load_model(xml)
    path = tmp_path / "geoms.html"
    q = np.asarray(model.qpos0, np.float64)
    phalanx.viewer.html(model, q, path, camera=CAMERA, lighting=False)
    _open(browser, path)
    image = _screenshot(browser)
    kin = phalanx.kinematics(model, q[None])
    inside = {"sphere": (0, 0, 0), "capsule": (0, 0, 0.15), "box": (0, 0, 0),
              "cylinder": (0, 0, 0), "ellipsoid": (0, 0, 0), "mesh": (0.05, 0.05, 0.05),
              "hfield": (0, 0, 0.06)}  # the hill's top is 0.1 above the body
    for name, local in inside.items():
        b = model.body_id(name)
        point = kin["xpos"][0, b] + kin["xmat"][0, b] @ np.asarray(local)
        _assert_drawn(image, _pixel(browser, point), _colour(model, b), radius=1)
    # the hill's top is at its height (0.1), not its elevation (1): background above it
    b = model.body_id("hfield")
    above = kin["xpos"][0, b] + np.array([0.0, 0.0, 0.25])
    bg = phalanx.viewer.BACKGROUND
    _assert_drawn(image, _pixel(browser, above),
                  np.array([(bg >> 16) & 255, (bg >> 8) & 255, bg & 255]), radius=1)
    # the plane (the world body's static colour) below the bodies
    plane = _pixel(browser, (0.0, 1.0, -0.5))
    c = phalanx.viewer.STATIC
    _assert_drawn(image, plane, np.array([(c >> 16) & 255, (c >> 8) & 255, c & 255]))


def test_grid_of_environments_and_contacts(browser, tmp_path):
    """four environments in a grid, each with its own pose, and the contact points marked"""
    xml = tmp_path / "ball.xml"
    xml.write_text("""<mujoco><worldbody><geom type="plane" size="2 2 .1"/>
      <body name="ball" pos="0 0 .1"><freejoint/><geom type="sphere" size=".1"/></body>
      </worldbody></mujoco>""")
    model = phalanx.load_model(xml)
    q = np.tile(np.asarray(model.qpos0, np.float64), (4, 3, 1))
    q[:, :, 2] = np.array([0.099, 0.5, 0.099])  # resting, lifted, resting
    q[:, :, 0] += np.arange(4)[:, None] * 0.1
    path = tmp_path / "grid.html"
    phalanx.viewer.html(model, q, path, camera=CAMERA, lighting=False, spacing=1.0,
                        contacts=True)
    _open(browser, path)
    data = json.loads(re.search(r'id="phx-data" type="application/json">(.*?)</script>',
                                path.read_text(), re.S).group(1))
    assert data["offsets"] == [[0, 0, 0], [1.0, 0, 0], [0, -1.0, 0], [1.0, -1.0, 0]]
    assert data["contacts"]["count"] == [1, 0, 1] * 4  # touching, lifted, touching
    ball = model.body_id("ball")
    image = _screenshot(browser)
    for e in range(4):
        centre = np.array(data["offsets"][e]) + q[e, 0, :3]
        _assert_drawn(image, _pixel(browser, centre), _colour(model, ball))
    browser.execute_script("window.phalanxViewer.setFrame(1)")
    visible = browser.execute_script(
        "return window.phalanxViewer.project(3, arguments[0])", ball)
    np.testing.assert_allclose(visible, _pixel(browser, np.array(data["offsets"][3])
                                               + q[3, 1, :3]), atol=1.0)


def test_bad_input_and_the_command_line(tmp_path, capsys):
    model = phalanx.load_model(HUMANOID)
    with pytest.raises(ValueError, match=r"qpos must have shape .* nq = 28"):
        phalanx.viewer.html(model, np.zeros((2, 5)))
    with pytest.raises(ValueError, match="NaN"):
        phalanx.viewer.html(model, np.full(model.nq, np.nan))
    traj = tmp_path / "t.npz"
    qs = np.tile(np.asarray(model.qpos0), (7, 1))
    np.savez(traj, qpos=qs, dt=0.02)
    out = tmp_path / "h.html"
    assert cli.main(["view", HUMANOID, "--traj", str(traj), "--out", str(out)]) == 0
    page = out.read_text()
    data = json.loads(re.search(r'id="phx-data" type="application/json">(.*?)</script>', page,
                                re.S).group(1))
    assert (data["envs"], data["frames"], data["dt"]) == (1, 7, 0.02)
    assert "THREE.OrbitControls" in page and "http" not in page.split("<script>")[0]
    np.savez(tmp_path / "bad.npz", q=qs)
    assert cli.main(["view", HUMANOID, "--traj", str(tmp_path / "bad.npz")]) == 2
    assert "holds no array 'qpos'" in capsys.readouterr().err


def test_an_example_writes_its_page_beside_its_plot(browser, tmp_path):
    """examples/cartpole_mppi.py: the replay page beside the plot holds every step it ran and
    opens without errors; its last frame is the example's last state"""
    from conftest import load_example

    example = load_example("cartpole_mppi")
    result = example.main(["--seconds", "0.2", "--samples", "16", "--horizon", "10", "--out",
                           str(tmp_path)])
    page = tmp_path / "cartpole_mppi.html"
    assert (tmp_path / "cartpole_mppi.png").is_file() and page.is_file()
    data = json.loads(re.search(r'id="phx-data" type="application/json">(.*?)</script>',
                                page.read_text(), re.S).group(1))
    assert data["frames"] == len(result["t"]) == 20
    _open(browser, page)
    browser.execute_script(f"window.phalanxViewer.setFrame({data['frames'] - 1})")
    model = phalanx.load_model(example.MODEL)
    pole = model.body_id("pole")  # its frame's origin is the hinge, on the cart
    last = phalanx.kinematics(model, result["qpos"][-1:])["xpos"][0, pole]
    np.testing.assert_allclose(browser.execute_script(
        "return window.phalanxViewer.project(0, arguments[0])", pole),
        _pixel_of(browser, last, data["camera"]), atol=1.0)
