"""The bank files' two pentest findings, with ``dealbroker payouts`` as the operator's process:
a payout file is readable by its owner only (0600) whatever the umask, and a status report
that is refused (not the answer to a file we exported, not XML, too large, with a DTD, not a
pain.002) is one ``error:`` line and a non-zero exit, with nothing changed in the database."""

import asyncio
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dealbroker.payments.iso20022 import MAX_REPORT_BYTES
from tests.conftest import row_counts
from tests.payments.bank import RAIL, pending_payout, read_file, status_report
from tests.processes import env

IBAN = "NO9386011117947"


def run_payouts(
    db_url: str, cwd: Path, *args: str, umask: int = 0o022
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dealbroker", "payouts", *args],
        env=env(db_url, **RAIL),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        umask=umask,
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077], ids=["umask000", "umask022", "umask077"])
async def test_a_payout_file_is_readable_by_its_owner_only_whatever_the_umask(
    sessionmaker, db_url, tmp_path, bank_rail, umask
):
    await pending_payout(sessionmaker, 450000, IBAN)

    exported = await asyncio.to_thread(
        run_payouts, db_url, tmp_path, "export", "--out", "day.xml", umask=umask
    )

    assert exported.returncode == 0, exported.stderr
    sent = read_file(tmp_path / "day.xml")
    assert mode(tmp_path / "day.xml") == 0o600
    # Written again from the stored copy: the same.
    again = await asyncio.to_thread(
        run_payouts, db_url, tmp_path, "file", sent.message_id, "--out", "again.xml", umask=umask
    )
    assert again.returncode == 0, again.stderr
    assert mode(tmp_path / "again.xml") == 0o600
    assert not list(tmp_path.glob(".*.partial"))


def refused_once(result: subprocess.CompletedProcess[str]) -> str:
    """The refusal's one line: exit code non-zero, one ``error:`` line, no traceback."""
    assert result.returncode != 0, result
    assert result.stdout == "", result
    said = result.stderr.splitlines()
    assert len(said) == 1, result.stderr
    assert said[0].startswith("error: "), result.stderr
    return said[0]


async def test_every_refused_status_report_is_one_error_line_and_changes_nothing(
    sessionmaker, db_url, tmp_path, bank_rail
):
    deal = await pending_payout(sessionmaker, 450000, IBAN)
    exported = await asyncio.to_thread(run_payouts, db_url, tmp_path, "export", "--out", "f.xml")
    assert exported.returncode == 0, exported.stderr
    (transfer,) = read_file(tmp_path / "f.xml").transfers
    paid = [(transfer.end_to_end_id, "ACSC", None, None)]
    valid = status_report("BANK-1", read_file(tmp_path / "f.xml").message_id, paid)
    reports = {
        # A valid report, naming our payout, but the answer to a file we never exported.
        "foreign": (status_report("BANK-2", "NOT-OUR-FILE-1", paid), "never exported here"),
        "not_xml": (b"this is not xml <", "not well-formed XML"),
        "truncated": (valid[: len(valid) // 2], "not well-formed XML"),
        "too_large": (b" " * (MAX_REPORT_BYTES + 1), "larger than"),
        "doctype": (
            b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x "y">]>' + valid.split(b"?>", 1)[1],
            "DOCTYPE",
        ),
        "not_pain_002": (b'<?xml version="1.0"?><Document xmlns="urn:x"/>', "not a pain.002"),
        "invalid": (valid.replace(b"<TxSts>ACSC</TxSts>", b"<TxSts>NOPE!</TxSts>"), "not a valid"),
    }
    before = await row_counts(sessionmaker)
    for name, (body, reason) in reports.items():
        path = tmp_path / f"{name}.xml"
        path.write_bytes(body)

        result = await asyncio.to_thread(run_payouts, db_url, tmp_path, "import", str(path))

        line = refused_once(result)
        assert reason in line, (name, line)
        assert await row_counts(sessionmaker) == before, name
    payment = await deal.payment()
    assert payment is not None
    assert payment.status == "PendingPayOut"
    missing = await asyncio.to_thread(
        run_payouts, db_url, tmp_path, "import", str(tmp_path / "none.xml")
    )
    assert "cannot read" in refused_once(missing)

    # The bank's real answer is still taken afterwards.
    (tmp_path / "valid.xml").write_bytes(valid)
    imported = await asyncio.to_thread(
        run_payouts, db_url, tmp_path, "import", str(tmp_path / "valid.xml")
    )
    assert imported.returncode == 0, imported.stderr
    payment = await deal.payment()
    assert payment is not None
    assert payment.status == "PaidOut"
