"""ISO 20022 messages of the bank-file payout rail: the credit transfer initiation we send
(pain.001.001.03) and the payment status report the bank sends back (pain.002.001.03).

Both are checked against the schemas ISO 20022 publishes, kept in ``xsd/`` (see its README):
a file we write is valid before it leaves, and a report is read only once it is valid. Reports
come from outside, so they are parsed with no DTD, no entities, no network and a size bound;
a document that declares a DOCTYPE is refused outright (a bank's report never has one).
"""

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from pathlib import Path

from lxml import etree

from dealbroker.core import money

XSD = Path(__file__).resolve().parent / "xsd"
PAIN_001 = "urn:iso:std:iso:20022:tech:xsd:pain.001.001.03"
PAIN_002 = "urn:iso:std:iso:20022:tech:xsd:pain.002.001.03"
# A status report for a day's files is a few kilobytes per payout; this leaves room for tens of
# thousands and keeps a hostile file from costing more than a moment to refuse.
MAX_REPORT_BYTES = 8 * 1024 * 1024
# ISO 20022 texts: names are Max140Text, remittance information Max140Text.
MAX_NAME = 140


class MessageError(ValueError):
    """A message that is not what the schema (or our rules for reading it) allows."""


@dataclass(frozen=True)
class Party:
    """An account holder and account: ``kind`` "iban" or "account" (Norwegian BBAN)."""

    name: str
    kind: str
    account: str


@dataclass(frozen=True)
class Transfer:
    end_to_end_id: str
    amount_minor: int
    currency: str
    creditor: Party
    remittance: str


@dataclass(frozen=True)
class Debtor:
    """The operator's client-funds account, whence payouts are paid."""

    party: Party
    bic: str
    org_number: str


@cache
def _schema(name: str) -> etree.XMLSchema:
    # The schemas are our own files: parsed with the same safe parser, no network.
    return etree.XMLSchema(etree.parse(str(XSD / name), _parser()))


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


def _el(parent: etree._Element, tag: str, text: str | None = None, **attrs: str) -> etree._Element:
    element = etree.SubElement(parent, f"{{{PAIN_001}}}{tag}", attrs)
    if text is not None:
        element.text = text
    return element


def _account(parent: etree._Element, tag: str, party: Party, currency: str | None) -> None:
    """``DbtrAcct``/``CdtrAcct``: an IBAN as IBAN, a Norwegian account number as the domestic
    BBAN under ``Othr`` (the code list's ``BBAN`` scheme)."""
    account = _el(parent, tag)
    ident = _el(account, "Id")
    if party.kind == "iban":
        _el(ident, "IBAN", party.account)
    else:
        other = _el(ident, "Othr")
        _el(other, "Id", party.account)
        _el(_el(other, "SchmeNm"), "Cd", "BBAN")
    if currency is not None:
        _el(account, "Ccy", currency)


def credit_transfer(
    message_id: str,
    created: datetime,
    execution_date: date,
    debtor: Debtor,
    transfers: list[Transfer],
) -> bytes:
    """A pain.001.001.03 document paying ``transfers`` from ``debtor``'s account on
    ``execution_date``: one payment information block per currency, charges borne by the
    debtor (``DEBT``: the seller receives the whole payout), each transfer's end-to-end id its
    payout call's. Validated against the schema; ``MessageError`` if it is not valid."""
    if not transfers:
        raise MessageError("a credit transfer file needs at least one transfer")
    root = etree.Element(f"{{{PAIN_001}}}Document", nsmap={None: PAIN_001})
    initiation = _el(root, "CstmrCdtTrfInitn")
    header = _el(initiation, "GrpHdr")
    _el(header, "MsgId", message_id)
    _el(header, "CreDtTm", created.replace(microsecond=0).isoformat())
    _el(header, "NbOfTxs", str(len(transfers)))
    _el(header, "CtrlSum", money.to_string(sum(t.amount_minor for t in transfers)))
    initiator = _el(header, "InitgPty")
    _el(initiator, "Nm", debtor.party.name[:MAX_NAME])
    _organisation(initiator, debtor.org_number)
    for currency in sorted({t.currency for t in transfers}):
        batch = [t for t in transfers if t.currency == currency]
        block = _el(initiation, "PmtInf")
        _el(block, "PmtInfId", f"{message_id}-{currency}"[:35])
        _el(block, "PmtMtd", "TRF")
        _el(block, "NbOfTxs", str(len(batch)))
        _el(block, "CtrlSum", money.to_string(sum(t.amount_minor for t in batch)))
        _el(block, "ReqdExctnDt", execution_date.isoformat())
        dbtr = _el(block, "Dbtr")
        _el(dbtr, "Nm", debtor.party.name[:MAX_NAME])
        _organisation(dbtr, debtor.org_number)
        _account(block, "DbtrAcct", debtor.party, currency)
        _el(_el(_el(block, "DbtrAgt"), "FinInstnId"), "BIC", debtor.bic)
        _el(block, "ChrgBr", "DEBT")
        for transfer in batch:
            tx = _el(block, "CdtTrfTxInf")
            ids = _el(tx, "PmtId")
            _el(ids, "InstrId", transfer.end_to_end_id)
            _el(ids, "EndToEndId", transfer.end_to_end_id)
            _el(_el(tx, "Amt"), "InstdAmt", money.to_string(transfer.amount_minor), Ccy=currency)
            _el(_el(tx, "Cdtr"), "Nm", transfer.creditor.name[:MAX_NAME])
            _account(tx, "CdtrAcct", transfer.creditor, None)
            _el(_el(tx, "RmtInf"), "Ustrd", transfer.remittance[:140])
    validate_credit_transfer(root)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True)


def _organisation(party: etree._Element, org_number: str) -> None:
    if not org_number:
        return
    other = _el(_el(_el(party, "Id"), "OrgId"), "Othr")
    _el(other, "Id", org_number)
    _el(_el(other, "SchmeNm"), "Cd", "CUST")


def validate_credit_transfer(document: etree._Element) -> None:
    """``MessageError`` unless ``document`` is a valid pain.001.001.03."""
    schema = _schema("pain.001.001.03.xsd")
    if not schema.validate(document):
        raise MessageError(f"not a valid pain.001.001.03: {schema.error_log.last_error}")


@dataclass(frozen=True)
class TransactionStatus:
    """The bank's word on one transfer: ``status`` (ACSC, ACCP, RJCT...), its reason, and the
    amount it names, if it names one."""

    end_to_end_id: str
    status: str
    reason: str | None
    amount_minor: int | None
    currency: str | None


@dataclass(frozen=True)
class StatusReport:
    message_id: str
    original_message_id: str
    # The status of the whole file, or of a payment information block, when the bank gives
    # one for all its transfers rather than one per transfer (a file refused as a whole).
    group_status: str | None
    group_reason: str | None
    block_statuses: dict[str, tuple[str, str | None]]
    transactions: list[TransactionStatus]


def read_status_report(data: bytes) -> StatusReport:
    """Read a pain.002.001.03 payment status report, refusing (``MessageError``) anything too
    large, with a DOCTYPE, malformed, or not valid against the schema."""
    if len(data) > MAX_REPORT_BYTES:
        raise MessageError(f"the report is larger than {MAX_REPORT_BYTES} bytes")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        # Refused before parsing (the parser resolves nothing, and the check after it catches
        # a DOCTYPE in another encoding).
        raise MessageError("a status report must not declare a DOCTYPE")
    try:
        tree = etree.fromstring(data, _parser()).getroottree()
    except etree.XMLSyntaxError as exc:
        raise MessageError(f"not well-formed XML: {exc}") from exc
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        raise MessageError("a status report must not declare a DOCTYPE")
    root = tree.getroot()
    tag = etree.QName(root).text  # "{namespace}name"
    if tag != f"{{{PAIN_002}}}Document":
        raise MessageError(f"not a pain.002.001.03 payment status report (root {tag})")
    schema = _schema("pain.002.001.03.xsd")
    if not schema.validate(tree):
        raise MessageError(f"not a valid pain.002.001.03: {schema.error_log.last_error}")
    report = root[0]
    group = _child(report, "OrgnlGrpInfAndSts")
    blocks: dict[str, tuple[str, str | None]] = {}
    transactions = []
    for block in _children(report, "OrgnlPmtInfAndSts"):
        block_status = _text(block, "PmtInfSts")
        if block_status is not None:
            blocks[_text(block, "OrgnlPmtInfId") or ""] = (block_status, _reason(block))
        for tx in _children(block, "TxInfAndSts"):
            transactions.append(_transaction(tx))
    return StatusReport(
        message_id=_text(_child(report, "GrpHdr"), "MsgId") or "",
        original_message_id=_text(group, "OrgnlMsgId") or "",
        group_status=_text(group, "GrpSts"),
        group_reason=_reason(group),
        block_statuses=blocks,
        transactions=transactions,
    )


def _transaction(tx: etree._Element) -> TransactionStatus:
    end_to_end = _text(tx, "OrgnlEndToEndId")
    status = _text(tx, "TxSts")
    if end_to_end is None or status is None:
        raise MessageError("a transaction status without OrgnlEndToEndId or TxSts")
    amount, currency = None, None
    instructed = tx.find(f"{{{PAIN_002}}}OrgnlTxRef/{{{PAIN_002}}}Amt/{{{PAIN_002}}}InstdAmt")
    if instructed is not None:
        amount, currency = _minor(instructed.text or ""), instructed.get("Ccy")
    return TransactionStatus(end_to_end, status, _reason(tx), amount, currency)


def _minor(text: str) -> int:
    try:
        value = Decimal(text)
    except InvalidOperation as exc:
        raise MessageError(f"not an amount: {text!r}") from exc
    if value != value.quantize(Decimal("0.01")):
        raise MessageError(f"an amount with more than two decimals: {text!r}")
    return int(value * money.MINOR_PER_MAJOR)


def _reason(element: etree._Element | None) -> str | None:
    """The first status reason: its code (or proprietary text) and additional information."""
    info = _child(element, "StsRsnInf")
    if info is None:
        return None
    reason = info.find(f"{{{PAIN_002}}}Rsn")
    code = None if reason is None else (_text(reason, "Cd") or _text(reason, "Prtry"))
    extra = " ".join(e.text or "" for e in _children(info, "AddtlInf")).strip()
    words = ": ".join(part for part in (code, extra) if part)
    return words[:500] or None


def _child(element: etree._Element | None, tag: str) -> etree._Element | None:
    return None if element is None else element.find(f"{{{PAIN_002}}}{tag}")


def _children(element: etree._Element, tag: str) -> list[etree._Element]:
    return element.findall(f"{{{PAIN_002}}}{tag}")


def _text(element: etree._Element | None, tag: str) -> str | None:
    child = _child(element, tag)
    return None if child is None or child.text is None else child.text.strip()
