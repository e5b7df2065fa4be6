"""Dispute evidence: the statements and photos the two parties of a disputed deal add until the
operator decides (``service``), how a photo is checked and re-encoded (``intake``) and where
its bytes are kept (``storage``)."""
