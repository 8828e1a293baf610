"""docs/reliability.md states fedsim's bounds: its table must equal fedsim/limits.py."""

import re
from pathlib import Path

from fedsim import limits

DOC = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"


def _table() -> dict[str, str]:
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", DOC.read_text(), flags=re.M)
    return {name: value.strip() for name, value in rows}


def _number(text: str):
    text = text.replace(",", "")
    return float(text) if re.search(r"[.e]", text) else int(text)


def test_every_limit_is_documented_with_its_value():
    table = _table()
    assert sorted(table) == sorted(limits.__all__)
    for name, text in table.items():
        value = getattr(limits, name)
        assert _number(text) == value, f"{name}: doc says {text}, code has {value}"
        assert type(_number(text)) is type(value), name


def test_doc_examples_match_the_constants():
    text = DOC.read_text()
    assert "1 GiB" in text and "15 s" in text  # the fuzz test's bounds (tests/test_fuzz_scenario.py)
    from tests.test_fuzz_scenario import MEMORY_BYTES, TIMEOUT_S

    assert MEMORY_BYTES == 2**30 and TIMEOUT_S == 15
    assert limits.MAX_SCENARIO_BYTES == 16 * 2**20 and "(16 MiB)" in text


def test_symlink_and_shared_folder_rules_match_the_code():
    """The names, patterns and values the run-folder, Parquet and core-slot sections state."""
    import inspect

    from fedsim.devices import population
    from fedsim.engine import threads
    from fedsim.report import parquet
    from fedsim.runner import folder

    text = " ".join(DOC.read_text().split())
    for name in folder.FILES + (folder.LOCK,) + tuple(f"{t}/" for t in folder.TABLE_FOLDERS):
        assert f"`{name}`" in text, name
    assert parquet.PART_NAME.fullmatch("part-00000.parquet") and parquet.PART_NAME.fullmatch("part-123456.parquet")
    for stranger in ("part-notes.parquet", "part-1.parquet"):  # the doc's examples of files left alone
        assert not parquet.PART_NAME.fullmatch(stranger) and f"`{stranger}`" in text
    assert not parquet.PART_NAME.fullmatch("part-0000.parquet")
    assert "(`part-NNNNN.parquet`, five or more digits)" in text
    assert parquet.TMP_NAME.fullmatch(".part-abc_12.tmp") and "(`.part-*.tmp`)" in text
    assert threads.SLOTS.name.startswith("fedsim-cores-") and "`<tempdir>/fedsim-cores-<uid>`" in text
    src = inspect.getsource(threads)
    assert "os.mkdir(folder, 0o700)" in src and "mode `0o700`" in text
    assert "st.st_mode & 0o022" in src and "writable by nobody else" in text
    for value in ('"turns"', '"unused"', "bypassed: "):
        assert value in src
    assert "`turns`" in text and "`unused`" in text and "`bypassed: <why>`" in text
    assert population.MAX_DAYS == int(limits.MAX_SECONDS // 86400) and "`MAX_SECONDS` / 86400" in text
    assert "mode `0o666` less the umask" in text and "0o666" in inspect.getsource(__import__("fedsim.devices.traceio", fromlist=["x"]))


def test_the_import_path_rule_matches_the_code():
    """The Plug-ins section's import-path rule (issue 28 item 2) against fedsim.plugins and __main__."""
    import inspect

    import fedsim.plugins as plugins

    text = " ".join(DOC.read_text().split())
    assert "`./NAME.py` or `./NAME/__init__.py` only" in text and "never added to `sys.path`" in text
    src = inspect.getsource(plugins)
    assert 'here / f"{top}.py"' in src and 'here / top / "__init__.py"' in src and "spec_from_file_location" in src
    assert "sys.path.insert" not in src and "sys.path.append" not in src
    main = (DOC.parents[1] / "fedsim" / "__main__.py").read_text()
    assert "del sys.path[0]" in main and "`python -m fedsim` removes the one Python puts first there" in text
    assert "`distribution D V (entry point E)`, `plugin module M`" in text
    assert 'f"distribution {dist.name} {dist.version} (entry point {ep.name})"' in src
    assert 'f"plugin module {name}"' in src


def test_dataset_file_rules_match_the_readers():
    """The Dataset files section (issue 28): its numbers and names are the readers'."""
    import inspect

    from fedsim.data.formats import errors, fedjax_sqlite, files, images, leaf

    text = " ".join(DOC.read_text().split())
    assert "`tests/test_fuzz_datasets.py`" in text and (Path(__file__).parent / "test_fuzz_datasets.py").is_file()
    assert "O_NONBLOCK" in inspect.getsource(files) and "non-blocking and checked on the open descriptor" in text
    assert errors.SHORT == 60 and "longer than 60 characters are cut" in text
    assert "2**24" in inspect.getsource(fedjax_sqlite) and "decompressed in 16 MiB steps" in text
    assert limits.MAX_IMAGE_PIXELS < 9000 * 9000 and "9000 x 9000 is refused" in text
    assert limits.MAX_IMAGE_PIXELS == 4096 * 4096 and "(4096 x 4096)" in text
    assert "MAX_JSON_DEPTH" in inspect.getsource(leaf) and "mmap" in inspect.getsource(leaf)
    assert 'simplefilter("error", Image.DecompressionBombWarning)' in inspect.getsource(images)
    assert "as_uri()" in inspect.getsource(fedjax_sqlite) and '"?mode=ro"' in inspect.getsource(fedjax_sqlite)
