// A real OpenID provider on loopback for the back office's login tests: panva's oidc-provider
// (installed under .cache/oidc-provider by scripts/test), with two confidential clients and one
// account. Every authorization request logs that account in and grants openid email at once
// (the interaction is finished by this script), so a test follows redirects only.
//
// Usage: node oidc_provider.mjs PORT REDIRECT_URI KEY_ID EMAIL
// Prints "ready" when it listens. KEY_ID names its signing key: a restart with another KEY_ID is
// a key rotation (the old key is gone from its JWKS).
import { createRequire } from 'node:module';
import { generateKeyPairSync } from 'node:crypto';
import path from 'node:path';

const [port, redirectUri, keyId, email] = process.argv.slice(2);
const require = createRequire(path.resolve(process.env.OIDC_PROVIDER_MODULES, 'x.js'));
const Provider = require('oidc-provider').default ?? require('oidc-provider');

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: keyId, use: 'sig', alg: 'RS256' };
const issuer = `http://127.0.0.1:${port}`;
const client = (id) => ({
  client_id: id,
  client_secret: `${id}-secret-that-is-long-enough-for-hs256-0123456789`,
  redirect_uris: [redirectUri],
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
});

const provider = new Provider(issuer, {
  clients: [client('dealbroker'), client('other-app')],
  jwks: { keys: [jwk] },
  pkce: { required: () => true },
  scopes: ['openid', 'email'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'] },
  conformIdTokenClaims: false, // the email claim in the ID token itself
  features: { devInteractions: { enabled: false } },
  findAccount: async (ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub, email, email_verified: true }),
  }),
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  ttl: { IdToken: 3600, AccessToken: 3600, AuthorizationCode: 60 },
});
provider.proxy = false;

// The interaction: log the one account in and grant what the client asked for.
provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([^/]+)$/);
  if (!match) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const result = {};
  if (details.prompt.name === 'login') {
    result.login = { accountId: 'operator-1' };
  } else {
    const grant = new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    grant.addOIDCScope('openid email');
    result.consent = { grantId: await grant.save() };
  }
  await provider.interactionFinished(ctx.req, ctx.res, result, { mergeWithLastSubmission: true });
});

provider.listen(Number(port), '127.0.0.1', () => console.log('ready'));
