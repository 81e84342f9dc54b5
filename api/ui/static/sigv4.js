// AWS Signature Version 4 (header form) in the browser, through the Web Crypto API: the
// signature every cmq node verifies (api/auth/sigv4.py). It signs `host` (the page's host: the
// browser sends it and a page cannot set it), `x-amz-date` and `x-amz-content-sha256` in the
// scope <yyyymmdd>/<region>/sqs/aws4_request. The secret never leaves this file's functions:
// only the derived signature is sent.
"use strict";

const cmqSigV4 = (() => {
  const ALGORITHM = "AWS4-HMAC-SHA256";
  const SERVICE = "sqs";
  const TERMINATOR = "aws4_request";
  const utf8 = new TextEncoder();

  function hex(buffer) {
    return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  async function sha256Hex(data) {
    return hex(await crypto.subtle.digest("SHA-256", typeof data === "string" ? utf8.encode(data) : data));
  }

  async function hmac(key, message) {
    const k = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return crypto.subtle.sign("HMAC", k, utf8.encode(message));
  }

  // Percent-encode the UTF-8 bytes of `text` outside A-Za-z0-9 and `safe` (uppercase hex).
  function encode(text, safe) {
    let out = "";
    for (const byte of utf8.encode(text)) {
      const c = String.fromCharCode(byte);
      out += /[A-Za-z0-9]/.test(c) || safe.includes(c) ? c : "%" + byte.toString(16).toUpperCase().padStart(2, "0");
    }
    return out;
  }

  function decode(text) {
    try { return decodeURIComponent(text); } catch (_) { return text; }
  }

  // The path as sent, dot and empty segments removed, encoded again (SigV4 outside S3).
  function canonicalUri(path) {
    const segments = [];
    for (const s of path.split("/")) {
      if (s === "..") segments.pop();
      else if (s !== "" && s !== ".") segments.push(s);
    }
    let normalized = "/" + segments.join("/");
    if (path.endsWith("/") && segments.length) normalized += "/";
    return encode(normalized, "-_.~/");
  }

  // Names and values decoded, re-encoded, sorted by name then value.
  function canonicalQuery(query) {
    if (!query) return "";
    const pairs = query.split("&").map((item) => {
      const i = item.indexOf("=");
      const [name, value] = i < 0 ? [item, ""] : [item.slice(0, i), item.slice(i + 1)];
      return [encode(decode(name), "-_.~"), encode(decode(value), "-_.~")];
    });
    pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
    return pairs.map(([n, v]) => `${n}=${v}`).join("&");
  }

  function amzDate(now) {
    return now.toISOString().replace(/[-:]/g, "").replace(/\.\d{3}/, "");
  }

  // The headers that sign `method` to `url` (relative to the page) with `body` (a string or
  // null) for `key` ({id, secret, region}): X-Amz-Date, X-Amz-Content-Sha256, Authorization.
  async function sign(key, method, url, body, now = new Date()) {
    const target = new URL(url, location.href);
    const date = amzDate(now);
    const day = date.slice(0, 8);
    const payload = await sha256Hex(body || "");
    const headers = { host: target.host, "x-amz-content-sha256": payload, "x-amz-date": date };
    const names = Object.keys(headers).sort();
    const canonical = [
      method.toUpperCase(),
      canonicalUri(target.pathname || "/"),
      canonicalQuery(target.search.replace(/^\?/, "")),
      names.map((n) => `${n}:${headers[n]}\n`).join(""),
      names.join(";"),
      payload,
    ].join("\n");
    const scope = `${day}/${key.region}/${SERVICE}/${TERMINATOR}`;
    const toSign = [ALGORITHM, date, scope, await sha256Hex(canonical)].join("\n");
    let signingKey = utf8.encode("AWS4" + key.secret);
    for (const part of [day, key.region, SERVICE, TERMINATOR]) signingKey = await hmac(signingKey, part);
    const signature = hex(await hmac(signingKey, toSign));
    return {
      "X-Amz-Date": date,
      "X-Amz-Content-Sha256": payload,
      Authorization: `${ALGORITHM} Credential=${key.id}/${scope}, SignedHeaders=${names.join(";")}, Signature=${signature}`,
    };
  }

  return { sign, canonicalUri, canonicalQuery };
})();
