"""The rail's ISO 20022 messages without a database: files valid against the schema or not
made at all, and the bank's reports read safely (no entities, no DTD, no network, bounded)."""

import asyncio
import time
from datetime import UTC, date, datetime

import pytest

from dealbroker.payments.iso20022 import (
    MAX_REPORT_BYTES,
    PAIN_002,
    Debtor,
    MessageError,
    Party,
    Transfer,
    credit_transfer,
    read_status_report,
)
from dealbroker.payments.models import PayoutStatusEntry
from tests.lifecycle_helpers import count
from tests.payments.bank import payouts, status_report

DEBTOR = Debtor(
    Party("Dealbroker AS klientmidler", "account", "15030000002"), "DNBANOKK", "923609016"
)


def transfer(end_to_end: str = "a" * 32, account: str = "NO9386011117947") -> Transfer:
    return Transfer(end_to_end, 427500, "NOK", Party("Kari Nordmann", "iban", account), "Payout")


def test_a_file_is_made_only_when_it_is_valid():
    made = credit_transfer("DBP1", datetime.now(UTC), date.today(), DEBTOR, [transfer()])
    assert b'<InstdAmt Ccy="NOK">4275.00</InstdAmt>' in made
    with pytest.raises(MessageError, match="pain.001.001.03"):
        credit_transfer("DBP1", datetime.now(UTC), date.today(), DEBTOR, [transfer("x" * 36)])
    with pytest.raises(MessageError, match="pain.001.001.03"):
        credit_transfer("DBP1", datetime.now(UTC), date.today(), DEBTOR, [transfer(account="9")])
    with pytest.raises(MessageError, match="at least one"):
        credit_transfer("DBP1", datetime.now(UTC), date.today(), DEBTOR, [])


def test_a_valid_report_is_read():
    report = read_status_report(
        status_report("STS1", "DBP1", [("a" * 32, "RJCT", "AC04", 427500)], "PART")
    )
    assert (report.message_id, report.original_message_id, report.group_status) == (
        "STS1",
        "DBP1",
        "PART",
    )
    [tx] = report.transactions
    assert (tx.end_to_end_id, tx.status, tx.reason, tx.amount_minor, tx.currency) == (
        "a" * 32,
        "RJCT",
        "AC04: Account closed",
        427500,
        "NOK",
    )


BILLION_LAUGHS = f"""<?xml version="1.0"?>
<!DOCTYPE Document [
  <!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
  <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
  <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
  <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
  <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
  <!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
]>
<Document xmlns="{PAIN_002}"><CstmrPmtStsRpt><GrpHdr><MsgId>&f;</MsgId>
<CreDtTm>2026-11-24T07:00:00</CreDtTm></GrpHdr><OrgnlGrpInfAndSts><OrgnlMsgId>X</OrgnlMsgId>
<OrgnlMsgNmId>pain.001.001.03</OrgnlMsgNmId></OrgnlGrpInfAndSts></CstmrPmtStsRpt></Document>
""".encode()

EXTERNAL_ENTITY = f"""<?xml version="1.0"?>
<!DOCTYPE Document [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<Document xmlns="{PAIN_002}"><CstmrPmtStsRpt><GrpHdr><MsgId>&secret;</MsgId>
<CreDtTm>2026-11-24T07:00:00</CreDtTm></GrpHdr><OrgnlGrpInfAndSts><OrgnlMsgId>X</OrgnlMsgId>
<OrgnlMsgNmId>pain.001.001.03</OrgnlMsgNmId></OrgnlGrpInfAndSts></CstmrPmtStsRpt></Document>
""".encode()


def utf16(data: bytes) -> bytes:
    """The same document in UTF-16, where no byte pattern finds the DOCTYPE: the parser's own
    guards and the check after parsing must."""
    declared = data.decode().replace(
        '<?xml version="1.0"?>', '<?xml version="1.0" encoding="UTF-16"?>'
    )
    return declared.encode("utf-16")


NETWORK_DTD = f"""<?xml version="1.0"?>
<!DOCTYPE Document SYSTEM "http://127.0.0.1:9/evil.dtd">
<Document xmlns="{PAIN_002}"><CstmrPmtStsRpt/></Document>
""".encode()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (BILLION_LAUGHS, "DOCTYPE"),
        (EXTERNAL_ENTITY, "DOCTYPE"),
        (utf16(BILLION_LAUGHS), "amplification|DOCTYPE"),
        (utf16(EXTERNAL_ENTITY), "DOCTYPE"),
        (NETWORK_DTD, "DOCTYPE"),
        (b"<" * (MAX_REPORT_BYTES + 1), "larger than"),
        (b"<Document", "not well-formed"),
        (b'<Document xmlns="urn:example"/>', "not a pain.002"),
        (f'<Document xmlns="{PAIN_002}"><CstmrPmtStsRpt/></Document>'.encode(), "not a valid"),
    ],
    ids=[
        "entity-expansion",
        "external-entity",
        "entity-expansion-utf16",
        "external-entity-utf16",
        "network-dtd",
        "oversized",
        "malformed",
        "foreign",
        "invalid",
    ],
)
def test_hostile_or_broken_reports_are_refused_quickly(data: bytes, why: str):
    started = time.monotonic()
    with pytest.raises(MessageError, match=why):
        read_status_report(data)
    assert time.monotonic() - started < 2


async def test_the_cli_refuses_a_hostile_report_and_changes_nothing(sessionmaker, db_url, tmp_path):
    (tmp_path / "bomb.xml").write_bytes(BILLION_LAUGHS)
    (tmp_path / "big.xml").write_bytes(
        status_report("STS", "DBP", []) + b" " * (MAX_REPORT_BYTES + 1)
    )
    for name, why in (("bomb.xml", "DOCTYPE"), ("big.xml", "larger than")):
        refused = await asyncio.to_thread(payouts, db_url, tmp_path, "import", name)
        assert refused.returncode == 1
        assert why in refused.stderr
    assert await count(sessionmaker, PayoutStatusEntry) == 0
