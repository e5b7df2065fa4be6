"""Where the pages include their routers from, until they call ``core.fastpath.routes``."""

from dealbroker.core.fastpath.routes import include

__all__ = ["include"]
