"""The project's shape: what nbdev and quarto need, checked without running them."""
from configparser import ConfigParser
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_quarto_yml_is_valid_and_mirrored():
    top = (ROOT / "_quarto.yml").read_text()
    assert yaml.safe_load(top)["project"]["type"] == "website"
    # nbdev_docs reads nbs/_quarto.yml; the top-level copy is the one users see
    assert (ROOT / "nbs" / "_quarto.yml").read_text() == top


def test_settings_pin_nbdev2_and_test_flags():
    cfg = ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini")
    d = cfg["DEFAULT"]
    assert d["lib_path"] == "easyvideor1" and d["nbs_path"] == "nbs"
    assert set(d["tst_flags"].split()) == {"notest", "slow", "gpu"}
    assert "nbdev==2.4.14" in d["dev_requirements"].split()


def test_setup_py_does_not_import_pkg_resources():
    assert "pkg_resources" not in (ROOT / "setup.py").read_text()


def test_every_module_has_a_notebook():
    mods = {p.stem for p in (ROOT / "easyvideor1").glob("*.py") if not p.stem.startswith("_")}
    exported = {m for nb in (ROOT / "nbs").glob("*.ipynb") for m in re.findall(r"#\| default_exp ([\w.]+)", nb.read_text())}
    assert mods <= exported, f"modules without a notebook: {sorted(mods - exported)}"
