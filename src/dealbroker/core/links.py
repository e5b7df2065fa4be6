"""The absolute capability links the API hands out: the seller's deal page and offer links
(and, in the sandbox, each party's mailbox).

A deal link carries an HMAC of the deal id under the deployment's secret key, so it can be
rebuilt for every deal response without storing the token, and checked without a lookup.
An offer link carries a token that is stored only as a hash and looked up by it; the token is
an HMAC of the link's id under the same key, so a later message to the buyer can carry the
link again (links issued before that carried a random token, which still works by its hash but
cannot be rebuilt). A deployment's links, with its key, come from
``integrations.service.deployment_links``.
"""

import uuid
from functools import lru_cache

from dealbroker.core.security import same_secret, signer

# Deal links kept per process, by deal id (about 200 bytes each): a list page renders 20.
DEAL_URLS_CACHED = 8192

# The recipient part of the seller's mailbox link; a buyer's names their offer.
MAILBOX_SELLER = "seller"


class Links:
    def __init__(self, base_url: str, key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._sign = signer(key)
        self.deal_url = lru_cache(maxsize=DEAL_URLS_CACHED)(self._deal_url)

    def _deal_signature(self, deal_id: uuid.UUID) -> str:
        return self._sign(f"deal-page:{deal_id}")

    def _deal_url(self, deal_id: uuid.UUID) -> str:
        """The seller's page of the deal (``deal_url``, cached: the same for ever)."""
        return f"{self.base_url}/d/{deal_id}/{self._deal_signature(deal_id)}"

    def deal_signature_valid(self, deal_id: uuid.UUID, signature: str) -> bool:
        return same_secret(signature, self._deal_signature(deal_id))

    def payout_confirm_url(self, deal_id: uuid.UUID, token: str) -> str:
        """The link, e-mailed to the seller, that confirms a change of the payout account."""
        return f"{self.deal_url(deal_id)}/payout-account/{token}"

    def _mailbox_signature(self, deal_id: uuid.UUID, recipient: str) -> str:
        return self._sign(f"mailbox:{deal_id}:{recipient}")

    def mailbox_url(self, deal_id: uuid.UUID, offer_id: uuid.UUID | None) -> str:
        """The sandbox mailbox of one party of a deal: the seller's (``offer_id`` None) or that
        of the buyer who made ``offer_id``. One link per party, since each may read only what
        was sent to them."""
        recipient = MAILBOX_SELLER if offer_id is None else str(offer_id)
        signature = self._mailbox_signature(deal_id, recipient)
        return f"{self.base_url}/sandbox/mailbox/{deal_id}/{recipient}/{signature}"

    def mailbox_signature_valid(self, deal_id: uuid.UUID, recipient: str, signature: str) -> bool:
        return same_secret(signature, self._mailbox_signature(deal_id, recipient))

    def form_token(self, page: str) -> str:
        """The CSRF token of every form on ``page`` (a capability path): an HMAC only this
        deployment can make, so another site cannot forge a form post."""
        return self._sign(f"form:{page}")

    def form_token_valid(self, page: str, token: str) -> bool:
        return same_secret(token, self.form_token(page))

    def offer_token(self, link_id: uuid.UUID) -> str:
        """The path token of the offer link ``link_id``: rebuilt on demand, stored as a hash."""
        return self._sign(f"offer-link:{link_id}")

    def offer_url(self, token: str, reference: uuid.UUID) -> str:
        # The interface wants the ``offer`` parameter last in the query string.
        return f"{self.base_url}/o/{token}?offer={reference}"
