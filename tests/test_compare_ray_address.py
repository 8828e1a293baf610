"""``compare --executor ray --address`` is checked before Ray is imported (issue 38 item 7): an
address a socket cannot be asked for exits 2 with one line naming ``--address``. Before the fix a
port of non-ASCII digits passed ``str.isdigit`` and then failed ``int`` (ValueError, exit 1), and a
host label longer than 63 characters (or empty) reached the IDNA codec under ``socket`` (UnicodeError,
exit 1). No Ray is needed: the option is refused before a session opens."""

from __future__ import annotations

import pytest

from fedsim.compare.ray_executor import check_options
from fedsim.scenario import ScenarioError

from _tiny_runs import QUAD, exit_2

BAD = [
    "h:\u00b2",              # superscript two: isdigit() but int() raises ValueError
    "h:\u0663\u0663",        # Arabic-Indic 33: int() takes it, a socket would get port 33
    "h:\u096e\u0966",        # Devanagari 80
    "a" * 64 + ":6379",     # a label of 64 characters: the IDNA codec raises UnicodeError
    "a..b:6379",             # an empty label: UnicodeError likewise
    "h\u00e9llo:6379",       # a non-ASCII host
    "[1.2.3.4]:6379",        # brackets hold IPv6 addresses only
    "[::1:6379",
    "h:0", "h:65536", "h:", ":6379", "h:8 0",
]
GOOD = ["auto", "127.0.0.1:6379", "head-node.example.com:6379", "[::1]:6379", "my_host:1", "a" * 63 + ":65535"]


@pytest.mark.parametrize("address", BAD)
def test_bad_addresses_exit_2_naming_the_option(address, tmp_path, write_yaml, capsys):
    path = write_yaml(QUAD)
    out = tmp_path / "c"
    exit_2(capsys, ["compare", str(path), "--out", str(out), "--executor", "ray", "--address", address],
           "--address ", "expected auto or HOST:PORT")
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("address", GOOD)
def test_good_addresses_pass_the_check(address):
    assert check_options(address, None, None).address == address


def test_the_check_refuses_before_ray_is_imported():
    with pytest.raises(ScenarioError, match="^--address 'h:\u00b2': expected auto or HOST:PORT"):
        check_options("h:\u00b2", None, None)
