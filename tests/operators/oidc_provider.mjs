// A real OpenID provider on loopback for the back office's login and the parties' eID signing
// tests: panva's oidc-provider (installed under .cache/oidc-provider by scripts/test), with two
// confidential clients.
//
// Usage: node oidc_provider.mjs PORT REDIRECT_URIS KEY_ID EMAIL [eid]
// REDIRECT_URIS is comma separated. Prints "ready" when it listens. KEY_ID names its signing
// key: a restart with another KEY_ID is a key rotation (the old key is gone from its JWKS).
//
// Without "eid" (the back office's login) every authorization logs one account in and grants
// what was asked at once, so a test follows redirects only. With "eid" it plays an eID broker:
// its interaction page asks which test person signs in (?as=PERSON answers it directly, as a
// test following redirects does) or cancels (?as=cancel), and the ID token carries what such a
// broker returns: name, birthdate, a national identity number ("nin") and the level of
// assurance ("acr").
//
// "eid-userinfo" is that broker keeping the person's claims out of the ID token, as Vipps Login
// does: the ID token carries sub and acr, name, birthdate and nin come from the userinfo
// endpoint only. "eid-userinfo-other-sub" answers userinfo with another subject's claims (a
// substituted response); "eid-userinfo-down" answers userinfo with 503.
//
// "eid-forged-KIND" is a broker whose token response carries a forged ID token, so that the
// whole flow meets each check of it: "none" (alg none, unsigned), "other-key" (signed by a key
// not in the JWKS, under the real key's id), and, signed with the real key, "audience" (another
// client's), "issuer" (another issuer's), "expired" and "nonce" (another flow's).
import { createRequire } from 'node:module';
import { generateKeyPairSync, sign as signWith } from 'node:crypto';
import path from 'node:path';

const [port, redirectUris, keyId, email, mode] = process.argv.slice(2);
const eid = mode?.startsWith('eid') ?? false;
const userinfoOnly = mode?.startsWith('eid-userinfo') ?? false;
const require = createRequire(path.resolve(process.env.OIDC_PROVIDER_MODULES, 'x.js'));
const Provider = require('oidc-provider').default ?? require('oidc-provider');

const ACR = 'urn:eid:test:high';
const PEOPLE = {
  sigrid: { name: 'Sigrid Selger', birthdate: '1980-04-01', nin: '01048012345' },
  bjorn: { name: 'Bjørn Kjøper', birthdate: '1992-11-30', nin: '30119254321' },
};

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: keyId, use: 'sig', alg: 'RS256' };
const issuer = `http://127.0.0.1:${port}`;
const client = (id) => ({
  client_id: id,
  client_secret: `${id}-secret-that-is-long-enough-for-hs256-0123456789`,
  redirect_uris: redirectUris.split(','),
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
});

const provider = new Provider(issuer, {
  clients: [client('dealbroker'), client('other-app')],
  jwks: { keys: [jwk] },
  pkce: { required: () => true },
  scopes: ['openid', 'email', 'profile'],
  acrValues: [ACR],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'birthdate', 'nin'],
  },
  // false: the scopes' claims in the ID token itself; true: in userinfo only (code flow).
  conformIdTokenClaims: userinfoOnly,
  features: { devInteractions: { enabled: false } },
  findAccount: async (ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub, email, email_verified: true, ...(PEOPLE[sub] ?? {}) }),
  }),
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  ttl: { IdToken: 3600, AccessToken: 3600, AuthorizationCode: 60, Interaction: 3600, Session: 3600, Grant: 3600 },
});
provider.proxy = false;

const page = (uid) => `<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>Test eID</title></head>
<body><main><h1>Test eID</h1><p>Sign in as:</p>
${Object.entries(PEOPLE).map(([id, p]) => `<p><a href="/interaction/${uid}?as=${id}">${p.name}</a></p>`).join('\n')}
<p><a href="/interaction/${uid}?as=cancel">Cancel</a></p></main></body></html>`;

// The userinfo endpoint's failures, for "eid-userinfo-other-sub" and "eid-userinfo-down".
provider.use(async (ctx, next) => {
  if (ctx.path !== '/me') return next();
  if (mode === 'eid-userinfo-down') {
    ctx.status = 503;
    ctx.body = { error: 'temporarily_unavailable' };
    return undefined;
  }
  await next();
  if (mode === 'eid-userinfo-other-sub' && ctx.status === 200) {
    const body = typeof ctx.body === 'string' ? JSON.parse(ctx.body) : ctx.body;
    ctx.body = { ...body, sub: 'bjorn', ...PEOPLE.bjorn };
  }
  return undefined;
});

// The forged ID tokens of "eid-forged-KIND".
const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
const forged = (idToken, kind) => {
  const [header, payload] = idToken.split('.').slice(0, 2).map((part) => JSON.parse(Buffer.from(part, 'base64url')));
  if (kind === 'none') return `${b64({ alg: 'none' })}.${b64(payload)}.`;
  const now = Math.floor(Date.now() / 1000);
  const claims = {
    audience: { ...payload, aud: 'other-app' },
    issuer: { ...payload, iss: 'http://127.0.0.1:1' },
    expired: { ...payload, iat: now - 7200, exp: now - 3600 },
    nonce: { ...payload, nonce: 'another-flows-nonce' },
    'other-key': payload,
  }[kind];
  const input = `${b64(header)}.${b64(claims)}`;
  const key = kind === 'other-key' ? stranger : privateKey;
  return `${input}.${signWith('sha256', Buffer.from(input), key).toString('base64url')}`;
};
provider.use(async (ctx, next) => {
  await next();
  if (ctx.path !== '/token' || !mode?.startsWith('eid-forged-') || ctx.status !== 200) return;
  const body = typeof ctx.body === 'string' ? JSON.parse(ctx.body) : ctx.body;
  if (body?.id_token) ctx.body = { ...body, id_token: forged(body.id_token, mode.slice(11)) };
});

// The interaction: log the account in and grant what the client asked for.
provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([^/]+)$/);
  if (!match) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const chosen = ctx.query.as;
  if (eid && details.prompt.name === 'login' && !chosen) {
    ctx.type = 'html';
    ctx.body = page(match[1]);
    return undefined;
  }
  let result = {};
  if (chosen === 'cancel') {
    result = { error: 'access_denied', error_description: 'End-User aborted interaction' };
  } else if (details.prompt.name === 'login') {
    result.login = eid ? { accountId: chosen, acr: ACR } : { accountId: 'operator-1' };
  } else {
    const grant = new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    grant.addOIDCScope(details.params.scope);
    result.consent = { grantId: await grant.save() };
  }
  await provider.interactionFinished(ctx.req, ctx.res, result, { mergeWithLastSubmission: true });
  return undefined;
});

provider.listen(Number(port), '127.0.0.1', () => console.log('ready'));
