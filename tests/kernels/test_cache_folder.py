"""The numba cache folder is named by the compiled sources under a NUMBA_CACHE_DIR too, and a
child process inherits its parent's."""
import json
import os
import subprocess
import sys
from pathlib import Path

FOLDER = """
import json, os, numba
from dasllama import kernels
print(json.dumps([numba.config.CACHE_DIR, os.environ["NUMBA_CACHE_DIR"], dict(os.environ)]))
"""


def _folder(env):
    out = subprocess.run([sys.executable, "-c", FOLDER], env=env, capture_output=True, text=True, check=True)
    folder, in_env, child_env = json.loads(out.stdout)
    assert folder == in_env
    return Path(folder), child_env


def _clean(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DASLLAMA_NUMBA_FOLDER")}
    return dict(env, DASLLAMA_CACHE=str(tmp_path / "home"))


def test_the_default_folder_is_named_under_dasllamas_cache(tmp_path):
    folder, child_env = _folder(_clean(tmp_path))
    assert folder.parent == tmp_path / "home" / "numba"
    assert _folder(child_env)[0] == folder                     # the compile helper's
    child_env.pop("NUMBA_CACHE_DIR")
    assert _folder(child_env)[0] == folder                     # tune's warm-up drops it


def test_a_users_numba_cache_dir_is_a_base_not_the_folder(tmp_path):
    user = tmp_path / "user"
    folder, child_env = _folder(dict(_clean(tmp_path), NUMBA_CACHE_DIR=str(user)))
    default, _ = _folder(_clean(tmp_path))
    assert folder == user / default.name          # a stale build's kernels never load from `user`
    assert _folder(child_env)[0] == folder
    other = tmp_path / "other"                    # a test's own cache, under a dasllama parent
    assert _folder(dict(child_env, NUMBA_CACHE_DIR=str(other)))[0] == other / default.name
