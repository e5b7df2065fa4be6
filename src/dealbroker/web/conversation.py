"""The conversation on the seller's and the buyer's pages: the words of a message's warning.
The rules (who writes when) are in ``parties``."""

from babel.lists import format_list

from dealbroker.conversations.warnings import Warning
from dealbroker.core import i18n
from dealbroker.core.i18n import N_, _

# What a warned message holds, as the sentence names it.
KINDS = {
    Warning.PHONE.value: N_("a phone number"),
    Warning.EMAIL.value: N_("an e-mail address"),
    Warning.LINK.value: N_("a link"),
    Warning.PAYMENT.value: N_("talk of paying some other way"),
}


def warning(kinds: list[str], reader: bool) -> str:
    """The warning a message with ``kinds`` carries: strong for its reader (never pay outside
    dealbroker), a reminder for its author."""
    what = format_list([_(KINDS[k]) for k in kinds if k in KINDS], locale=i18n.current())
    if reader:
        return _(
            "This message contains %(what)s. Never pay, or take payment, outside dealbroker: "
            "the money is only safe in the deal. Do not follow links or share contact details "
            "before the deal is paid."
        ) % {"what": what}
    return _(
        "Your message contains %(what)s. The other party is warned: payment outside "
        "dealbroker is not protected."
    ) % {"what": what}
