// The stand-in hosts for net_rules.rs, one HTTPS server under three names:
// a git host (the real `git http-backend` as CGI), an npm registry (one
// package to install, any PUT is a publish) and an event intake. Every
// request is logged as one JSON line to /d/log.jsonl before it is served.
'use strict';
const fs = require('fs');
const https = require('https');
const crypto = require('crypto');
const { spawn } = require('child_process');

const [GIT, REG, EVT] = process.argv.slice(2);
const log = (r) => fs.appendFileSync('/d/log.jsonl', JSON.stringify(r) + '\n');

const tgz = fs.readFileSync('/d/pkg.tgz');
const shasum = crypto.createHash('sha1').update(tgz).digest('hex');
const integrity = 'sha512-' + crypto.createHash('sha512').update(tgz).digest('base64');

function git(req, res, body) {
  const url = new URL(req.url, 'https://' + GIT);
  const env = {
    PATH: '/d/exec:/usr/bin:/bin',
    GIT_EXEC_PATH: '/d/exec',
    GIT_CONFIG_NOSYSTEM: '1',
    HOME: '/d/home',
    GIT_PROJECT_ROOT: '/d/repos',
    GIT_HTTP_EXPORT_ALL: '1',
    REQUEST_METHOD: req.method,
    PATH_INFO: decodeURIComponent(url.pathname),
    QUERY_STRING: url.search.slice(1),
    CONTENT_TYPE: req.headers['content-type'] || '',
    CONTENT_LENGTH: String(body.length),
    REMOTE_USER: 'sbx',
    REMOTE_ADDR: '198.18.0.2',
  };
  if (req.headers['content-encoding']) env.HTTP_CONTENT_ENCODING = req.headers['content-encoding'];
  if (req.headers['git-protocol']) env.GIT_PROTOCOL = req.headers['git-protocol'];
  const cgi = spawn('/d/exec/git-http-backend', [], { env });
  const out = [];
  cgi.stdout.on('data', (d) => out.push(d));
  cgi.stderr.on('data', (d) => process.stderr.write(d));
  cgi.on('close', () => {
    const all = Buffer.concat(out);
    const end = all.indexOf('\r\n\r\n');
    const head = all.slice(0, end).toString().split('\r\n');
    let status = 200;
    const headers = {};
    for (const l of head) {
      const i = l.indexOf(':');
      const k = l.slice(0, i).trim();
      const v = l.slice(i + 1).trim();
      if (k.toLowerCase() === 'status') status = parseInt(v, 10);
      else headers[k] = v;
    }
    res.writeHead(status, headers);
    res.end(all.slice(end + 4));
  });
  cgi.stdin.end(body);
}

function registry(req, res) {
  const name = 'sbx-e2e-pkg';
  if (req.method === 'GET' && req.url === '/' + name) {
    const v = {
      name, version: '1.0.0',
      dist: { tarball: `https://${REG}/${name}/-/${name}-1.0.0.tgz`, shasum, integrity },
    };
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ name, 'dist-tags': { latest: '1.0.0' }, versions: { '1.0.0': v } }));
  }
  if (req.method === 'GET' && req.url === `/${name}/-/${name}-1.0.0.tgz`) {
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    return res.end(tgz);
  }
  if (req.method === 'PUT') {
    res.writeHead(201, { 'content-type': 'application/json' });
    return res.end('{"ok":true}');
  }
  res.writeHead(404, { 'content-type': 'application/json' });
  res.end('{"error":"not found"}');
}

const opts = { key: fs.readFileSync('/d/leaf.key'), cert: fs.readFileSync('/d/leaf.pem') };
https
  .createServer(opts, (req, res) => {
    const chunks = [];
    req.on('data', (d) => chunks.push(d));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const host = (req.headers.host || '').split(':')[0];
      log({ host, method: req.method, path: req.url, len: body.length });
      if (host === GIT) return git(req, res, body);
      if (host === REG) return registry(req, res);
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('ok\n');
    });
  })
  .listen(443, '0.0.0.0', () => console.log('listening'));
