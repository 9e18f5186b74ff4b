import os
import stat

from kip.runtime import keys
from kip.runtime.files import open_private_log, private_dir, write_private
from kip.runtime.settings import KipSettings


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_kip_makes_its_folders_and_files_private_whatever_the_umask(tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir(mode=0o755)
    os.chmod(outer, 0o755)
    old = os.umask(0o022)
    try:
        home = private_dir(outer / "home" / "nested")
        write_private(home / "keys" / "secret.json", b"{}")
        with open_private_log(home / "pipeline.log") as log:
            log.write(b"line\n")
    finally:
        os.umask(old)
    assert _mode(outer / "home") == _mode(home) == _mode(home / "keys") == 0o700
    assert _mode(home / "keys" / "secret.json") == _mode(home / "pipeline.log") == 0o600
    assert _mode(outer) == 0o755   # a folder kip did not make is left as it was


def test_an_existing_file_is_tightened_when_rewritten(tmp_path):
    path = tmp_path / "open.json"
    path.write_text("{}")
    os.chmod(path, 0o644)
    write_private(path, b"{}")
    assert _mode(path) == 0o600


def test_deployment_keys_are_made_once_and_rotate(tmp_path):
    settings = KipSettings(home=tmp_path)
    made = settings.ensure_keys()
    assert len(made) == 5 and all(_mode(p) == 0o600 for p in made)   # model keys too
    assert settings.ensure_keys() == []   # kept
    first = settings.stamp_keys()
    rotated = keys.rotate_stamp(settings.stamp_keys_file, "s2")
    assert rotated.current == "s2" and set(rotated.keys) == {first.current, "s2"}
    assert keys.drop_stamp(settings.stamp_keys_file, first.current).keys.keys() == {"s2"}
    signing = keys.signing_key(settings.result_signing_key_file)
    public = keys.result_keys(settings.result_public_keys_file)
    assert public.keys == {signing.key_id: signing.public()}
    assert signing.private_key.get_secret_value() not in repr(signing)


def test_a_missing_key_file_says_how_to_make_it(tmp_path):
    settings = KipSettings(home=tmp_path)
    try:
        settings.stamp_keys()
    except keys.MissingKey as err:
        assert "kip keys init" in str(err)
    else:
        raise AssertionError("no error for a missing key ring")
