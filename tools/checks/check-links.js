#!/usr/bin/env node
// make test: every relative link in a tracked Markdown file resolves. A link [text](path) must name a
// file or folder that exists (relative to the file that holds it); a link with #anchor must name a
// heading of the target (GitHub's slugs: lower case, punctuation dropped, spaces to dashes, -1, -2
// for repeats). Links inside code blocks and code spans, and absolute URLs, are not checked.
// Usage: node tools/checks/check-links.js [FILE.md...]   (default: every *.md git tracks)
// Prints FILE:LINE: LINK: why, for each broken link. Exit status: 0 all resolve, 1 some do not.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const root = path.resolve(__dirname, '..', '..');
process.chdir(root);

// the prose lines of a Markdown text, as [line number, text] pairs: fenced blocks and code spans out
function proseLines(text) {
    const out = [];
    let fence = null;
    text.split('\n').forEach((line, i) => {
        const m = line.match(/^\s*(```+|~~~+)/);
        if (m) {
            if (fence === null) fence = m[1][0];
            else if (m[1][0] === fence) fence = null;
            return;
        }
        if (fence === null) out.push([i + 1, line.replace(/`[^`]*`/g, '')]);
    });
    return out;
}

// GitHub's anchor for a heading text
function slug(heading) {
    return heading.trim().toLowerCase()
        .replace(/`/g, '')
        .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .replace(/\s/g, '-');
}

const anchorCache = new Map();
// every anchor a Markdown file offers (its headings' slugs)
function anchorsOf(file) {
    if (anchorCache.has(file)) return anchorCache.get(file);
    const seen = new Map();
    const anchors = new Set();
    let fence = null;
    for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
        const f = line.match(/^\s*(```+|~~~+)/);
        if (f) {
            if (fence === null) fence = f[1][0];
            else if (f[1][0] === fence) fence = null;
            continue;
        }
        const h = fence === null && line.match(/^#{1,6}\s+(.*?)\s*#*\s*$/);
        if (!h) continue;
        const base = slug(h[1]);
        const n = seen.get(base) || 0;
        seen.set(base, n + 1);
        anchors.add(n === 0 ? base : `${base}-${n}`);
    }
    anchorCache.set(file, anchors);
    return anchors;
}

// why a link from `file` to `target` does not resolve, or null when it does
function brokenReason(file, target) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return null;   // http:, https:, mailto:
    const [rel, anchor] = target.split('#', 2);
    const dest = rel === '' ? file : path.normalize(path.join(path.dirname(file), decodeURI(rel)));
    if (!fs.existsSync(dest)) return `${dest} does not exist`;
    if (anchor === undefined || anchor === '') return null;
    if (!dest.endsWith('.md')) return null;
    return anchorsOf(dest).has(anchor) ? null : `${dest} has no heading with anchor #${anchor}`;
}

function main() {
    const files = process.argv.length > 2 ? process.argv.slice(2)
        : execFileSync('git', ['ls-files', '*.md'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    const broken = [];
    let links = 0;
    for (const file of files) {
        if (!fs.existsSync(file)) continue;
        for (const [n, line] of proseLines(fs.readFileSync(file, 'utf8'))) {
            for (const m of line.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
                links++;
                const why = brokenReason(file, m[1]);
                if (why) broken.push(`${file}:${n}: ${m[1]}: ${why}`);
            }
        }
    }
    for (const b of broken) console.log(b);
    if (broken.length > 0) {
        console.error(`check-links: ${broken.length} of ${links} links in ${files.length} files do not resolve`);
        process.exit(1);
    }
    console.log(`check-links: ${links} links in ${files.length} files resolve`);
}

main();
