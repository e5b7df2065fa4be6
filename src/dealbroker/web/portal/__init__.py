"""The developer portal's pages: an integration's members manage its credentials, webhooks and
sandbox, and read its requests and the event catalog."""
