"""Benign values a provider returns, which the screen must let through:
every id-like string in the shared provider fixtures (ids, fingerprints,
model names, header values), the ids other providers and clouds return,
and generated UUIDs, hashes and timestamps.

Usage: python3 generate_benign.py FIXTURES_DIR > benign.json"""
import base64, hashlib, json, pathlib, random, sys, uuid

def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)

def from_fixtures(root):
    found = set()
    for path in sorted(pathlib.Path(root).rglob('*')):
        if path.suffix == '.json':
            doc = json.loads(path.read_text())
            found.update(strings(doc.get('headers', {})))
            found.update(strings(doc.get('expect', {}).get('tool_calls', [])))
        elif path.suffix == '.sse':
            for line in path.read_text().splitlines():
                if line.startswith('data: ') and line[6:].startswith('{'):
                    try:
                        found.update(strings(json.loads(line[6:])))
                    except json.JSONDecodeError:
                        pass
    # Ids, not prose: no spaces, at least 6 bytes.
    return sorted(s for s in found if len(s) >= 6 and ' ' not in s and '\n' not in s)

KNOWN = [
    # OpenAI
    "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b", "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
    "call_12345xyz", "call_Ry3VmlhH9YrK2ILcnbPzuWSd", "file-BK7bzQj3FfZFXr7DbL6xJwfo",
    "asst_abc123", "thread_abc123", "run_abc123", "batch_abc123", "org-2x0n2xu6JnKX0Qn1ZDYBH8lW",
    "proj_abc123XYZ", "ft:gpt-4o-mini-2024-07-18:my-org:custom-suffix:9Xm1Q8bW",
    "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "fp_3b956da36b", "gpt-4o-2024-08-06",
    "o3-mini-2025-01-31", "text-embedding-3-large", "req_7c9e6679f4b04c2a8d35e2f6a1b0c3d4",
    # Anthropic
    "msg_013Zva2CMHLNnXjNJJKqJ2EF", "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
    "req_011CQq4dqdkKYtrn1T4LUuPV", "msgbatch_01HkcTjaV5uDC8jWR4ZsDV8d", "file_011CNha8iCJcU1wXNR6q4V8w",
    "claude-opus-4-1-20250805", "claude-3-5-haiku-latest", "anthropic-ratelimit-tokens-reset",
    "2025-01-31T12:00:00Z",
    # Google, AWS, Azure, others
    "projects/my-project/locations/us-central1/publishers/google/models/gemini-2.5-pro",
    "gemini-2.5-flash-preview-05-20", "models/text-embedding-004",
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet-20241022-v2:0",
    "anthropic.claude-3-haiku-20240307-v1:0", "amazon.titan-embed-text-v2:0",
    "1-67ccd2bf-0a1b2c3d4e5f60718293a4b5", "8f1b2c3d4e5f6a7b-SJC", "W/\"5e1c-1a2b3c4d\"",
    "cmpl-8dZ2oXkF9v1q", "gen-1741024512-AbCdEfGhIjKlMnOpQrSt", "mistral-large-2411",
    "meta-llama/Llama-3.3-70B-Instruct-Turbo", "deepseek-r1:14b", "qwen2.5-coder:32b-instruct-q4_K_M",
    "accounts/fireworks/models/llama-v3p1-405b-instruct", "us-east-1", "eastus2",
    "azureml://registries/azureml/models/Phi-4/versions/7",
    "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
    "v1.2.3-rc.1+build.5", "2026-12-03T08:05:42.123456789+00:00", "1733212342",
]

def generated():
    rnd = random.Random(22)
    out = []
    for i in range(20):
        b = rnd.randbytes(32)
        out.append(str(uuid.UUID(bytes=b[:16], version=4)))
        out.append(str(uuid.UUID(bytes=b[:16], version=4)).upper())
        out.append(hashlib.sha1(b).hexdigest())
        out.append(hashlib.sha256(b).hexdigest())
        out.append(hashlib.sha256(b).hexdigest().upper())
        out.append(hashlib.md5(b).hexdigest())
        out.append(base64.b64encode(hashlib.sha256(b).digest()).decode())
        out.append("sha256-" + base64.b64encode(hashlib.sha256(b).digest()).decode())
        out.append(base64.urlsafe_b64encode(hashlib.sha512(b).digest()).decode().rstrip('='))
        ulid_chars = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
        out.append(''.join(rnd.choice(ulid_chars) for _ in range(26)))
    return out

values = sorted(set(from_fixtures(sys.argv[1])) | set(KNOWN) | set(generated()))
json.dump({"source": "shared/fixtures/providers, provider documentation ids, generated ids and hashes",
           "values": values}, sys.stdout, indent=0)
