// A real OpenID Connect provider for the SSO tests: node-oidc-provider (the certified
// `oidc-provider` package from npm), configured from a JSON file the test writes.
//
//   node tests/oidc/provider.mjs CONFIG.json
//
// CONFIG: {port, clients: [...], jwks: {keys: [...]}, accounts: "accounts.json", idTokenTtl}
// accounts.json maps a login to its claims ({"groups": [...], "email": ...}); it is read on
// every login, so a test changes someone's groups between two sign-ins. The login form is
// the package's development interaction (any password).
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${config.port}`;

const provider = new Provider(issuer, {
  clients: config.clients,
  jwks: config.jwks,
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups', 'offline_access'],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: { enabled: true },
  },
  // The groups go into the ID token, as Keycloak, Okta and Entra ID can be set up to do.
  conformIdTokenClaims: false,
  ttl: { IdToken: config.idTokenTtl || 3600, AccessToken: 3600, Session: 3600, Grant: 3600, Interaction: 600 },
  cookies: { keys: ['test-cookie-key-not-secret'] },
  async loadExistingGrant(ctx) {
    // Consent is implied (a company's IdP does not ask its employees each time).
    const grant = new provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
  async findAccount(ctx, id) {
    const accounts = JSON.parse(readFileSync(config.accounts, 'utf8'));
    const account = accounts[id] || {};
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: account.email || `${id}@example.com`,
          email_verified: true,
          name: account.name || id,
          preferred_username: id,
          groups: account.groups || [],
        };
      },
    };
  },
});
provider.proxy = false;
provider.listen(config.port, '127.0.0.1', () => {
  console.log(`OIDC PROVIDER READY ${issuer}`);
});
