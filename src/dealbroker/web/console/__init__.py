"""The console both the back office and the developer portal are: one login (a one-time link or
OpenID Connect), one session cookie with the CSRF token of every form, one way to render a page,
refuse an action and show the audit trail and the webhook pages. A ``Console`` says the rest:
who may act (operators with roles, or one integration's members) and on what (every
integration, or their own)."""
