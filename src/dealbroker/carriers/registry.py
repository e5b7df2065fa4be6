"""The deployment's carrier (``DEALBROKER_CARRIER``), and why a process may not start with it."""

from dealbroker.carriers.base import Carrier
from dealbroker.core.settings import Settings


def startup_problem(settings: Settings) -> str | None:
    """Why ``serve`` or ``worker`` may not run with this carrier configuration (one line)."""
    if settings.carrier == "simulated" and not settings.is_sandbox:
        return (
            "the simulated carrier carries no parcel and runs only in the sandbox; production "
            "needs a real one (DEALBROKER_CARRIER=bring) or none"
        )
    if settings.carrier == "bring":
        from dealbroker.carriers.bring import configuration_problem

        return configuration_problem(settings)
    return None


def carrier_for(settings: Settings) -> Carrier | None:
    """The configured carrier, or None when the marketplace ships on its own."""
    if settings.carrier == "simulated":
        from dealbroker.carriers.simulated import SimulatedCarrier

        return SimulatedCarrier(settings)
    if settings.carrier == "bring":
        from dealbroker.carriers.bring import BringCarrier

        return BringCarrier(settings)
    return None
