// The Node clients, one mode per process, with exactly the environment under test:
//
//   node decide.mjs MODE CACHE_DIR NPM_AGENT_DIR URL...
//
// Decision functions (no traffic): each prints {"decisions": {url: {"decision", "detail"}}}
//   pfe1, pfe2   proxy-from-env 1.x / 2.x getProxyForUrl(url) ('' = direct)
//   npm          npm's @npmcli/agent getAgent(url, {proxy: null, noProxy: ''}) as npm-registry-fetch calls it
//                with npm's default config (proxy, https-proxy unset; noproxy ''), so the agent reads the env
// Real requests (the harness's recorders see where they go): each prints {"outcomes": {url: "status N" | "error: ..."}}
//   undici7, undici8   undici's request() through new EnvHttpProxyAgent()
//   http               node:http / node:https get() (Node >= 24 honours NODE_USE_ENV_PROXY=1 from the env)
//   fetch              Node's global fetch() (same)
// Every request has a 3 s timeout and runs after the previous one finished.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';

const [mode, cacheDir, agentDir, ...urls] = process.argv.slice(2);
const requireFromCache = createRequire(`${cacheDir}/package.json`);
const TIMEOUT = 3000;

function version(pkgDir) {
  return JSON.parse(readFileSync(`${pkgDir}/package.json`, 'utf8')).version;
}

function describe(err) {
  const parts = [];
  for (let e = err; e && parts.length < 4; e = e.cause) {
    parts.push(`${e.name || 'Error'}${e.code ? `[${e.code}]` : ''}: ${e.message}`);
  }
  return parts.join(' <- ');
}

async function decisions(decide) {
  const out = {};
  for (const url of urls) {
    try {
      const proxy = decide(url);
      out[url] = proxy ? { decision: 'proxy', detail: String(proxy) } : { decision: 'bypass', detail: '' };
    } catch (err) {
      out[url] = { decision: 'error', detail: describe(err) };
    }
  }
  return out;
}

async function outcomes(send) {
  const out = {};
  for (const url of urls) {
    try {
      out[url] = `status ${await send(url)}`;
    } catch (err) {
      out[url] = `error: ${describe(err)}`;
    }
  }
  return out;
}

function nodeGet(url) {
  return new Promise((resolve, reject) => {
    const mod = url.startsWith('https:') ? https : http;
    const req = mod.get(url, { timeout: TIMEOUT, rejectUnauthorized: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

const result = { node: process.version };
if (mode === 'pfe1' || mode === 'pfe2') {
  const { getProxyForUrl } = requireFromCache(mode);
  result.version = `proxy-from-env ${version(`${cacheDir}/node_modules/${mode}`)}`;
  result.decisions = await decisions((url) => getProxyForUrl(url));
} else if (mode === 'npm') {
  const { getAgent } = createRequire(`${agentDir}/package.json`)(agentDir);
  result.version = `@npmcli/agent ${version(agentDir)}`;
  result.decisions = await decisions((url) => getAgent(url, { proxy: null, noProxy: '' }).proxy?.url);
} else if (mode === 'undici7' || mode === 'undici8') {
  const undici = requireFromCache(mode);
  result.version = `undici ${version(`${cacheDir}/node_modules/${mode}`)} EnvHttpProxyAgent`;
  let dispatcher;
  try {
    dispatcher = new undici.EnvHttpProxyAgent({ connectTimeout: TIMEOUT, headersTimeout: TIMEOUT, bodyTimeout: TIMEOUT });
  } catch (err) {
    result.outcomes = Object.fromEntries(urls.map((url) => [url, `error: new EnvHttpProxyAgent(): ${describe(err)}`]));
  }
  if (dispatcher) {
    result.outcomes = await outcomes(async (url) => {
      const res = await undici.request(url, { dispatcher, signal: AbortSignal.timeout(TIMEOUT) });
      await res.body.dump();
      return res.statusCode;
    });
  }
} else if (mode === 'http') {
  result.version = `node ${process.version} http.get`;
  result.outcomes = await outcomes(nodeGet);
} else if (mode === 'fetch') {
  result.version = `node ${process.version} fetch`;
  result.outcomes = await outcomes(async (url) => {
    const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT) });
    await res.arrayBuffer();
    return res.status;
  });
} else {
  throw new Error(`unknown mode ${mode}`);
}
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
