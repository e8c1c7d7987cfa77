// BENCH_SET=big's client: N concurrent OpenAI-compatible streamed completions against one llama-server
// on a unix socket, temperature 0, each a fixed prompt of P tokens (token ids, so its length is exact)
// and M tokens out (ignore_eos, so every answer has M tokens; cache_prompt off, so every request
// prefills its whole prompt). Only node's built-in http.
//
//   node big-client.js SOCKET CLIENTS PROMPT_TOKENS PREDICT OUT.json [BAN]
//
// BAN "A-B": token ids A..B get logit_bias false (never sampled). big.sh bans the fixture vocab's byte
// tokens: a lone byte piece is invalid UTF-8, and llama-server then ends a stream with HTTP 500 ("does
// not match the expected Content-only format").
// The prompt: the server's /tokenize of a fixed English text, repeated to PROMPT_TOKENS ids; client k
// starts k words in, so concurrent prompts differ. OUT.json: {clients: [{prompt_n, predicted_n,
// ttft_ms, total_ms, first_token_at_ms, end_at_ms, prefill_tok_s, decode_tok_s, text, tokens}],
// wall_ms}: times from the start of the batch; prefill/decode tok/s are the server's timings when it
// sends them (the last chunk's `timings`), else the client's (prompt / ttft, (n - 1) / (end - first)).
// Exit 1 naming the request when a request fails or an answer is short.
'use strict';
const http = require('http');
const fs = require('fs');

const [socketPath, nClients, promptTokens, predict, outPath, ban] = process.argv.slice(2);
const logitBias = [];
if (ban) {
    const [a, b] = ban.split('-').map(Number);
    for (let id = a; id <= b; ++id) logitBias.push([id, false]);
}
const BASE = 'once upon a time there was a little girl who lived in a small house near the big green ' +
    'forest and every day she went to play with her friends the dog and the cat';

function request(path, body, onData) {
    return new Promise((resolve, reject) => {
        const data = JSON.stringify(body);
        const req = http.request({ socketPath, path, method: 'POST', headers: { 'Content-Type': 'application/json',
            'Content-Length': Buffer.byteLength(data) } }, (res) => {
            let all = '';
            res.setEncoding('utf8');
            res.on('data', (chunk) => { all += chunk; if (onData) onData(chunk); });
            res.on('end', () => res.statusCode === 200 ? resolve(all) : reject(new Error(`${path}: HTTP ${res.statusCode}: ${all.slice(0, 300)}`)));
        });
        req.on('error', reject);
        req.setTimeout(3600 * 1000);
        req.end(data);
    });
}

async function promptIds(k) {
    const ids = JSON.parse(await request('/tokenize', { content: BASE })).tokens;
    if (!ids || ids.length === 0) throw new Error('/tokenize returned no tokens');
    const out = [];
    for (let i = k; out.length < Number(promptTokens); ++i) out.push(ids[i % ids.length]);
    return out;
}

async function one(k, prompt, t0) {
    const c = { prompt_n: prompt.length, predicted_n: 0, text: '', tokens: [], timings: null };
    let pending = '';
    const started = Date.now();
    await request('/v1/completions', { prompt, max_tokens: Number(predict), temperature: 0, seed: 42, stream: true,
        ignore_eos: true, cache_prompt: false, return_tokens: true, logit_bias: logitBias }, (chunk) => {
        pending += chunk;
        let nl;
        while ((nl = pending.indexOf('\n')) >= 0) {
            const line = pending.slice(0, nl).trim();
            pending = pending.slice(nl + 1);
            if (!line.startsWith('data:')) continue;
            const d = line.slice(5).trim();
            if (d === '[DONE]') continue;
            const j = JSON.parse(d);
            if (j.error) throw new Error(`client ${k}: ${JSON.stringify(j.error)}`);
            if (j.timings) c.timings = j.timings;
            const ch = (j.choices || [])[0];
            if (!ch) continue;
            const piece = ch.text !== undefined ? ch.text : ((ch.delta || {}).content || '');
            if (Array.isArray(j.tokens)) c.tokens.push(...j.tokens);
            if (piece.length > 0 || Array.isArray(j.tokens) && j.tokens.length > 0) {
                if (c.first_token_at_ms === undefined) c.first_token_at_ms = Date.now() - t0;
                c.predicted_n += 1;
            }
            c.text += piece;
        }
    });
    c.end_at_ms = Date.now() - t0;
    c.ttft_ms = c.first_token_at_ms - (started - t0);
    c.total_ms = c.end_at_ms - (started - t0);
    if (c.timings && c.timings.predicted_n) c.predicted_n = c.timings.predicted_n;
    c.prefill_tok_s = c.timings && c.timings.prompt_per_second ? c.timings.prompt_per_second : c.prompt_n / (c.ttft_ms / 1000);
    c.decode_tok_s = c.timings && c.timings.predicted_per_second ? c.timings.predicted_per_second :
        (c.predicted_n - 1) / ((c.end_at_ms - c.first_token_at_ms) / 1000);
    if (c.predicted_n < Number(predict)) throw new Error(`client ${k}: ${c.predicted_n} tokens of ${predict}`);
    return c;
}

(async () => {
    // every prompt first, then every request at once: which requests share a prefill batch depends on
    // when they arrive, and the batch changes the last bits of the answers
    const prompts = [];
    for (let k = 0; k < Number(nClients); ++k) prompts.push(await promptIds(k));
    const t0 = Date.now();
    const clients = await Promise.all(prompts.map((p, k) => one(k, p, t0)));
    fs.writeFileSync(outPath, JSON.stringify({ clients, wall_ms: Date.now() - t0 }, null, 1));
})().catch((e) => { console.error(`big-client: ${e.message}`); process.exit(1); });
