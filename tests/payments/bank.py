"""The bank's side of the bank-file payout rail, for tests: the deployment's settings, deals
driven to ``PendingPayOut`` through the real services, ``dealbroker payouts`` as a real
process, reading the files we write and writing the status reports a bank would send back."""

import subprocess
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from lxml import etree

from dealbroker.core.settings import Settings
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.payments.iso20022 import PAIN_001, PAIN_002, XSD, validate_credit_transfer
from dealbroker.signatures.service import SignatureType
from tests.lifecycle_helpers import DealDriver, new_deal
from tests.processes import env

RAIL = {
    "DEALBROKER_PAYOUT_RAIL": "bank_file",
    "DEALBROKER_PAYOUT_DEBTOR_NAME": "Dealbroker AS klientmidler",
    "DEALBROKER_PAYOUT_DEBTOR_ACCOUNT": "1503.00.00002",
    "DEALBROKER_PAYOUT_DEBTOR_BIC": "DNBANOKK",
    "DEALBROKER_PAYOUT_DEBTOR_ORG_NUMBER": "923609016",
}
BANK_SETTINGS = Settings(
    database_url="sqlite://",
    environment="sandbox",
    payout_rail="bank_file",
    payout_debtor_name=RAIL["DEALBROKER_PAYOUT_DEBTOR_NAME"],
    payout_debtor_account=RAIL["DEALBROKER_PAYOUT_DEBTOR_ACCOUNT"],
    payout_debtor_bic=RAIL["DEALBROKER_PAYOUT_DEBTOR_BIC"],
    payout_debtor_org_number=RAIL["DEALBROKER_PAYOUT_DEBTOR_ORG_NUMBER"],
)
NS = {"p": PAIN_001}


async def pending_payout(sessionmaker, price_minor: int, account: str) -> DealDriver:  # type: ignore[no-untyped-def]
    """A pickup deal agreed at ``price_minor`` whose seller registered ``account``, approved by
    the buyer: its payout is decided and handed to the bank-file rail."""
    d = await new_deal(sessionmaker)
    await d.approve(await d.offer("Pickup", price_minor))
    await d.sign(SignatureType.SELLER, Actor.SELLER)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    await d.pay()
    await d.payout_account(account)
    await d.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    payment = await d.payment()
    assert payment is not None
    assert payment.status == "PendingPayOut"
    return d


def payouts(db_url: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``dealbroker payouts ...`` as the operator runs it, on the bank-file rail."""
    return subprocess.run(
        [sys.executable, "-m", "dealbroker", "payouts", *args],
        env=env(db_url, **RAIL),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def popen_payouts(db_url: str, cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dealbroker", "payouts", *args],
        env=env(db_url, **RAIL),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@dataclass(frozen=True)
class SentTransfer:
    end_to_end_id: str
    amount_minor: int
    currency: str
    creditor: str
    account: str
    scheme: str  # "IBAN" or "BBAN"


@dataclass(frozen=True)
class SentFile:
    message_id: str
    transfers: list[SentTransfer]
    control_sum_minor: int


def _minor(text: str) -> int:
    return int(Decimal(text) * 100)


def read_file(path: Path) -> SentFile:
    """A pain.001 we wrote, checked against the schema, as the bank would read it."""
    document = etree.parse(str(path)).getroot()
    validate_credit_transfer(document)
    transfers = []
    for tx in document.iterfind(".//p:CdtTrfTxInf", NS):
        amount = tx.find("p:Amt/p:InstdAmt", NS)
        iban = tx.find("p:CdtrAcct/p:Id/p:IBAN", NS)
        other = tx.find("p:CdtrAcct/p:Id/p:Othr", NS)
        if iban is not None:
            account, scheme = iban.text, "IBAN"
        else:
            account = other.findtext("p:Id", namespaces=NS)
            scheme = other.findtext("p:SchmeNm/p:Cd", namespaces=NS)
        transfers.append(
            SentTransfer(
                tx.findtext("p:PmtId/p:EndToEndId", namespaces=NS),
                _minor(amount.text),
                amount.get("Ccy"),
                tx.findtext("p:Cdtr/p:Nm", namespaces=NS),
                account,
                scheme,
            )
        )
    header = document.find("p:CstmrCdtTrfInitn/p:GrpHdr", NS)
    assert int(header.findtext("p:NbOfTxs", namespaces=NS)) == len(transfers)
    return SentFile(
        header.findtext("p:MsgId", namespaces=NS),
        transfers,
        _minor(header.findtext("p:CtrlSum", namespaces=NS)),
    )


def status_report(
    message_id: str,
    original_message_id: str,
    statuses: list[tuple[str, str, str | None, int | None]],
    group_status: str | None = None,
) -> bytes:
    """A pain.002.001.03 as the bank sends it: ``(end-to-end id, status, reason code, amount in
    minor units or None)`` per transfer; checked against the schema here, as a bank's is."""
    root = etree.Element(f"{{{PAIN_002}}}Document", nsmap={None: PAIN_002})

    def el(parent, tag, text=None, **attrs):  # type: ignore[no-untyped-def]
        child = etree.SubElement(parent, f"{{{PAIN_002}}}{tag}", attrs)
        if text is not None:
            child.text = text
        return child

    report = el(root, "CstmrPmtStsRpt")
    header = el(report, "GrpHdr")
    el(header, "MsgId", message_id)
    el(header, "CreDtTm", "2026-11-24T07:00:00")
    group = el(report, "OrgnlGrpInfAndSts")
    el(group, "OrgnlMsgId", original_message_id)
    el(group, "OrgnlMsgNmId", "pain.001.001.03")
    if group_status:
        el(group, "GrpSts", group_status)
    if statuses:
        block = el(report, "OrgnlPmtInfAndSts")
        el(block, "OrgnlPmtInfId", f"{original_message_id}-NOK")
        for end_to_end, status, reason, amount in statuses:
            tx = el(block, "TxInfAndSts")
            el(tx, "OrgnlEndToEndId", end_to_end)
            el(tx, "TxSts", status)
            if reason:
                info = el(tx, "StsRsnInf")
                el(el(info, "Rsn"), "Cd", reason)
                el(info, "AddtlInf", "Account closed")
            if amount is not None:
                ref = el(tx, "OrgnlTxRef")
                el(el(ref, "Amt"), "InstdAmt", f"{Decimal(amount) / 100:.2f}", Ccy="NOK")
    etree.XMLSchema(etree.parse(str(XSD / "pain.002.001.03.xsd"))).assertValid(root)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")
