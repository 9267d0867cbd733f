"""detect-secrets' plugin formats (Yelp/detect-secrets at 5e14193, Apache-2.0):
one entry per plugin pattern, three samples each, generated from the
plugin's own regex (rstr), split in two so that no complete credential
shape sits in the repository."""
import json, random, sys, importlib
import rstr
importlib.import_module("rstr.xeger").STAR_PLUS_LIMIT = 120
G = rstr.Rstr(random.Random(5))
# (plugin, pattern id, regex of the bare secret, self-identifying)
PATTERNS = [
    ("ArtifactoryDetector", "api_token", r"AKC[a-zA-Z0-9]{10,40}", True),
    ("ArtifactoryDetector", "password", r"AP[\dABCDEF][a-zA-Z0-9]{8,30}", True),
    ("AWSKeyDetector", "access_key_id", r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}", True),
    ("AWSKeyDetector", "secret_access_key", r"[0-9a-zA-Z/+]{40}", False),
    ("AzureStorageKeyDetector", "account_key", r"AccountKey=[a-zA-Z0-9+/]{86}==", True),
    ("BasicAuthDetector", "url_password", r"https://[a-z]{4,8}:[A-Za-z0-9!$]{8,16}@[a-z]{5,9}\.example\.com/", True),
    ("CloudantDetector", "url_password", r"https://[a-z]{6}:[a-f0-9]{64}@[a-z]{6}\.cloudant\.com", True),
    ("DiscordBotTokenDetector", "bot_token", r"[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}", True),
    ("GitHubTokenDetector", "token", r"(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}", True),
    ("GitLabTokenDetector", "token", r"(glpat|gldt|glft|glsoat|glrt)-[A-Za-z0-9_\-]{20,50}", True),
    ("GitLabTokenDetector", "runner_registration", r"GR1348941[A-Za-z0-9_\-]{20,50}", True),
    ("GitLabTokenDetector", "ci_build", r"glcbt-([0-9a-fA-F]{2}_)?[A-Za-z0-9_\-]{20,50}", True),
    ("GitLabTokenDetector", "incoming_mail", r"glimt-[A-Za-z0-9_\-]{25}", True),
    ("GitLabTokenDetector", "pipeline_trigger", r"glptt-[A-Za-z0-9_\-]{40}", True),
    ("GitLabTokenDetector", "agent", r"glagent-[A-Za-z0-9_\-]{50,1024}", True),
    ("GitLabTokenDetector", "oauth_secret", r"gloas-[A-Za-z0-9_\-]{64}", True),
    ("IbmCloudIamDetector", "api_key", r"[a-zA-Z0-9_\-]{44}", False),
    ("IbmCosHmacDetector", "secret_access_key", r"[a-f0-9]{48}", False),
    ("JwtTokenDetector", "jwt", r"eyJ[A-Za-z0-9_-]{20,40}\.eyJ[A-Za-z0-9_-]{20,60}\.[A-Za-z0-9_-]{43}", True),
    ("MailchimpDetector", "api_key", r"[0-9a-z]{32}-us[0-9]{1,2}", True),
    ("NpmDetector", "auth_token", r"//registry\.npmjs\.org/:_authToken=[A-Fa-f0-9]{8}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{12}", True),
    ("OpenAIDetector", "api_key", r"sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}", True),
    ("PrivateKeyDetector", "private_key", r"-----BEGIN (RSA|EC|DSA|OPENSSH|PGP|ENCRYPTED) PRIVATE KEY-----\n[A-Za-z0-9+/]{64}\n[A-Za-z0-9+/]{20}==\n-----END PRIVATE KEY-----", True),
    ("PypiTokenDetector", "upload_token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{70,90}", True),
    ("PypiTokenDetector", "test_upload_token", r"pypi-AgENdGVzdC5weXBpLm9yZw[A-Za-z0-9_-]{70,90}", True),
    ("SendGridDetector", "api_key", r"SG\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9_-]{43}", True),
    ("SlackDetector", "token", r"xox(a|b|p|o|s|r)-(\d{10,12}-){1,3}[a-z0-9]{24,32}", True),
    ("SlackDetector", "webhook", r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]{8,10}/B[a-zA-Z0-9_]{8,10}/[a-zA-Z0-9_]{24}", True),
    ("SoftlayerDetector", "api_url", r"https://api\.softlayer\.com/soap/v3/[a-z0-9]{64}", True),
    ("SoftlayerDetector", "api_key", r"[a-z0-9]{64}", False),
    ("SquareOAuthDetector", "secret", r"sq0csp-[0-9A-Za-z_-]{43}", True),
    ("StripeDetector", "secret_key", r"(r|s)k_live_[0-9a-zA-Z]{24}", True),
    ("TelegramBotTokenDetector", "bot_token", r"\d{8,10}:[0-9A-Za-z_-]{35}", True),
    ("TwilioKeyDetector", "account_sid", r"AC[a-z0-9]{32}", True),
    ("TwilioKeyDetector", "api_key", r"SK[a-z0-9]{32}", True),
]
out = []
for plugin, pid, rx, ident in PATTERNS:
    samples = []
    while len(samples) < 3:
        s = G.xeger(rx)
        if s not in samples: samples.append(s)
    out.append({"rule": f"{plugin}.{pid}", "service": plugin.removesuffix("Detector").lower(),
                "self_identifying": ident,
                "samples": [[s[:len(s)//2], s[len(s)//2:]] for s in samples]})
json.dump({"source": "Yelp/detect-secrets detect_secrets/plugins at 5e141933554a0b74e7341841f318be21e895339c (Apache-2.0)", "rules": out}, sys.stdout, indent=0)
