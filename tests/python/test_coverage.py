"""scripts/coverage.py: the status it gives a model is what loading and stepping it does."""

import importlib.util
import pathlib

import phalanx

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("coverage_script", REPO / "scripts" / "coverage.py")
coverage = importlib.util.module_from_spec(spec)
spec.loader.exec_module(coverage)

BALL_ON_FLOOR = """<mujoco><worldbody><geom type="plane" size="1 1 .1"/>
  <body pos="0 0 .5"><freejoint/><geom type="sphere" size=".1"/></body></worldbody></mujoco>"""
EGG_ON_FLOOR = BALL_ON_FLOOR.replace('type="sphere" size=".1"', 'type="ellipsoid" size=".1 .1 .2"')
UNKNOWN_ELEMENT = "<mujoco><worldbody><rocket/></worldbody></mujoco>"


def test_each_status_and_its_reason(tmp_path):
    rows = {}
    for name, text in [("ball", BALL_ON_FLOOR), ("egg", EGG_ON_FLOOR), ("bad", UNKNOWN_ELEMENT)]:
        path = tmp_path / f"{name}.xml"
        path.write_text(text)
        rows[name] = coverage.check(path, steps=400)
    # the ball falls 0.4 m in about 0.29 s and rests on the floor with one contact
    assert rows["ball"]["status"] == "ok" and rows["ball"]["max_contacts"] == 1
    assert 0 < rows["ball"]["contacts_seen"] < 400
    # the egg (an ellipsoid) falls and rests on the floor, one plane-ellipsoid contact
    assert rows["egg"]["status"] == "ok" and rows["egg"]["max_contacts"] == 1
    # MuJoCo's compiler's refusal (element and line), with the file named by its base name
    assert rows["bad"]["status"] == "load"
    reason = rows["bad"]["reason"]
    assert reason.startswith("bad.xml: ") and "'rocket', line 1" in reason, reason
    assert str(tmp_path) not in rows["bad"]["reason"]


def test_include_fragments_are_not_models(tmp_path):
    fragment = tmp_path / "assets.xml"
    fragment.write_text("<mujocoinclude><default/></mujocoinclude>")
    model = tmp_path / "model.xml"
    model.write_text(BALL_ON_FLOOR)
    assert coverage.is_include_only(fragment) and not coverage.is_include_only(model)
    assert phalanx.load_model(model).nbody == 2
