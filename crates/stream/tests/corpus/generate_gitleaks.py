"""Builds Keel's secret corpus from gitleaks' default rules.

Usage: python3 gen.py GITLEAKS_TOML COMMIT > secrets_gitleaks.json
Needs `rstr` (PyPI). Each rule's regex is rewritten from Go RE2 to Python
syntax, three samples are generated from it with rstr.xeger, and the
secret group is cut out of each. A rule is *self-identifying* when its
regex still matches a sample standing alone, with no keyword around it.
Samples are stored split in two parts so that no complete credential
shape appears in the repository."""
import json, math, random, re, sys, tomllib
import importlib, rstr
importlib.import_module("rstr.xeger").STAR_PLUS_LIMIT = 400

def go_to_py(rx):
    rx = rx.replace(r'\z', r'\Z').replace('[[:alnum:]]', '[a-zA-Z0-9]')
    out, i, depth, stack = [], 0, 0, []
    # stack holds, per open group, how many "(?i:" we opened inside it
    opened = [0]
    in_class = False
    while i < len(rx):
        c = rx[i]
        if c == '\\':
            out.append(rx[i:i+2]); i += 2; continue
        if in_class:
            if c == ']': in_class = False
            out.append(c); i += 1; continue
        if c == '[':
            in_class = True; out.append(c)
            if rx[i+1:i+2] == '^': out.append('^'); i += 1
            if rx[i+1:i+2] == ']': out.append(']'); i += 1
            i += 1; continue
        if rx.startswith('(?i)', i) and i > 0:
            out.append('(?i:'); opened[-1] += 1; i += 4; continue
        if c == '(':
            opened.append(0); out.append(c); i += 1; continue
        if c == ')':
            out.append(')' * opened.pop()); out.append(')'); i += 1; continue
        if c == '|' and opened[-1]:
            # an alternation closes the scoped flag group and reopens it
            out.append(')' * opened[-1] + '|' + '(?i:' * opened[-1]); i += 1; continue
        out.append(c); i += 1
    out.append(')' * opened.pop())
    return ''.join(out)

def entropy(s):
    if not s: return 0.0
    n = len(s)
    return -sum(s.count(ch) / n * math.log2(s.count(ch) / n) for ch in set(s))

def secret_of(rx, text, group):
    m = rx.search(text)
    if not m: return None
    if group is not None: return m.group(group)
    if m.lastindex: 
        for g in range(1, (m.lastindex or 0) + 1):
            if m.group(g): return m.group(g)
    return m.group(0)

def samples(rule, rx, n=3, tries=400):
    out = []
    group = rule.get('secretGroup')
    for _ in range(tries):
        try:
            text = GEN.xeger(rx)
        except ValueError:
            continue
        s = secret_of(rx, text, group)
        if not s or len(s) < 8 or s in out: continue
        if entropy(s) < rule.get('entropy', 0): continue
        # A bare hex run is indistinguishable from a hash (sourcegraph's
        # legacy form): the benign corpus holds hashes, so skip it.
        if rule['id'] == 'sourcegraph-access-token' and re.fullmatch(r'[0-9a-fA-F]+', s): continue
        if any(ord(ch) > 126 or ord(ch) < 32 and ch not in '\n' for ch in s): continue
        out.append(s)
        if len(out) == n: break
    return out

def self_identifying(rx, group, s):
    return secret_of(rx, s, group) == s

GEN = rstr.Rstr(random.Random(22))

# Dots gitleaks leaves unescaped where the vendor's format has a dot.
MEANT_LITERAL = {'slack-webhook-url': 'hooks.slack.com', 'slack-config-access-token': 'xoxe.xox'}

def main():
    rules = tomllib.load(open(sys.argv[1], 'rb'))['rules']
    out = []
    for r in rules:
        if 'regex' not in r: continue
        rx = re.compile(go_to_py(r['regex']))
        if r['id'] in MEANT_LITERAL:
            literal = MEANT_LITERAL[r['id']]
            rx = re.compile(go_to_py(r['regex'].replace(literal, literal.replace('.', r'\.'))))
        ss = samples(r, rx)
        if not ss:
            print('no sample for', r['id'], file=sys.stderr); continue
        ident = all(self_identifying(rx, r.get('secretGroup'), s) for s in ss)
        cut = lambda s: [s[:len(s)//2], s[len(s)//2:]]
        out.append({'rule': r['id'], 'service': r['id'].split('-')[0], 'self_identifying': ident,
                    'samples': [cut(s) for s in ss]})
    json.dump({'source': 'gitleaks config/gitleaks.toml at ' + sys.argv[2] + ' (MIT)',
               'rules': out}, sys.stdout, indent=0)

main()
