"""An in-memory Hugging Face Hub on 127.0.0.1, for end-to-end tests of pushing and loading checkpoints.

huggingface_hub's own HTTP client talks to it unchanged (`HF_ENDPOINT`, with `HF_HUB_DISABLE_XET=1` so that large
files take the LFS path). It speaks the endpoints that huggingface_hub 2.4.0 uses to

- authenticate (`GET /api/whoami-v2`; `GET /api/agent-harnesses`, which it fetches for its user agent), create
  repositories (`POST /api/repos/create`, 409 when it exists);
- validate a card's metadata (`POST /api/validate-yaml`, with a subset of the Hub's rules: `yaml_errors`);
- commit: `preupload` (LFS above `lfs_threshold` bytes, regular below), the LFS batch API with the basic transfer
  (upload, then verify), the NDJSON `commit`, and branches;
- read: model info (at a revision), `tree`, `paths-info`, and `resolve` (HEAD and GET) with the `ETag`,
  `X-Repo-Commit` and, for LFS files, `X-Linked-Etag` / `X-Linked-Size` headers the client checks.

Private repositories answer as the Hub does: 401 without a token, 404 to another user, 401 to an unknown token.
Any request it does not understand is answered 501 and recorded in `unexpected`, so that a protocol change in a new
huggingface_hub shows as a clear test failure rather than a hang. `fail` makes chosen requests fail on purpose.
"""

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml


DEFAULT_BRANCH = "main"
# Licence ids the validation accepts: the Hub's list is longer; these are the ones the tests and cards use.
KNOWN_LICENSES = {"apache-2.0", "mit", "mpl-2.0", "cc-by-4.0", "cc-by-sa-4.0", "bsd-3-clause", "other"}
PIPELINE_TAGS = {"translation", "summarization", "text-classification", "text2text-generation", "fill-mask"}
HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
METADATA_BLOCK = re.compile(r"\A---\n(.*?\n)?---\n", re.DOTALL)
INVALID_TOKEN = "Invalid credentials in Authorization header"


def git_blob_id(content: bytes) -> str:
    """The git object id of a file's content, as the Hub reports it for regular files."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass(frozen=True)
class StoredFile:
    content: bytes
    lfs: bool

    @property
    def etag(self) -> str:
        """What the Hub gives as ETag: the sha256 for an LFS file, the git blob id otherwise."""
        return hashlib.sha256(self.content).hexdigest() if self.lfs else git_blob_id(self.content)


@dataclass
class Repository:
    repo_id: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit id
    commits: dict[str, dict[str, StoredFile]] = field(default_factory=dict)  # commit id -> files

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/")[0]

    def commit_id(self, revision: str) -> str | None:
        """The commit a branch name or a commit id points to."""
        return self.branches.get(revision) or (revision if revision in self.commits else None)

    def add_commit(self, files: dict[str, StoredFile], message: str, branch: str) -> str:
        oid = hashlib.sha1(f"{self.repo_id}\n{branch}\n{len(self.commits)}\n{message}".encode()).hexdigest()
        self.commits[oid] = files
        self.branches[branch] = oid
        return oid


@dataclass
class Answer:
    """An endpoint's answer: a JSON payload (or bytes), its status and headers."""

    payload: object
    status: int = 200
    headers: dict = field(default_factory=dict)


@dataclass
class Fault:
    """An injected failure: the next request of `method` whose path matches `path` gets `status`."""

    method: str
    path: re.Pattern
    status: int
    message: str
    used: bool = False

    def applies(self, method: str, path: str) -> bool:
        return not self.used and method == self.method and self.path.search(path) is not None


class NotUnderstood(Exception):
    """A request of a known endpoint in a form this server does not implement."""


class HubError(Exception):
    """An error answer: its status, message, the `X-Error-Code` the client reads where the Hub sends one, and any
    other headers or body fields the Hub sends with it."""

    def __init__(self, status: int, message: str, error_code: str | None = None, headers=None, **fields):
        super().__init__(message)
        self.status, self.message, self.error_code = status, message, error_code
        self.headers, self.fields = headers or {}, fields

    def answer(self) -> Answer:
        headers = {"X-Error-Message": self.message, **self.headers}
        if self.error_code:
            headers["X-Error-Code"] = self.error_code
        return Answer({"error": self.message, **self.fields}, self.status, headers)


def parent_folders(paths) -> set[str]:
    """Every folder that holds one of `paths`, at any depth."""
    return {"/".join(parts[:depth]) for parts in (path.split("/") for path in paths) for depth in range(1, len(parts))}


def yaml_errors(content: str) -> list[str]:
    """What the Hub's card validation would refuse in `content`'s metadata (a subset of its rules)."""
    match = METADATA_BLOCK.match(content)
    if match is None:
        return []
    try:
        metadata = yaml.safe_load(match.group(1) or "") or {}
    except yaml.YAMLError as error:
        return [f"Invalid YAML: {error}"]
    if not isinstance(metadata, dict):
        return ["The metadata must be a mapping"]
    errors = []
    if "license" in metadata and metadata["license"] not in KNOWN_LICENSES:
        errors.append(f'"license" must be a known licence id, got {metadata["license"]!r}')
    if "pipeline_tag" in metadata and metadata["pipeline_tag"] not in PIPELINE_TAGS:
        errors.append(f'"pipeline_tag" is not a task: {metadata["pipeline_tag"]!r}')
    for key in ("language", "tags", "metrics", "datasets"):
        values = metadata.get(key, [])
        if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
            errors.append(f'"{key}" must be a list of strings')
        elif key == "datasets":
            errors += [f'"datasets": {name!r} is not a dataset id' for name in values if not HUB_ID.match(name)]
    for index, entry in enumerate(metadata.get("model-index", [])):
        for result in entry.get("results", []):
            task, dataset, metrics = result.get("task", {}), result.get("dataset", {}), result.get("metrics")
            if not task.get("type") or not dataset.get("type") or not dataset.get("name"):
                errors.append(f'"model-index[{index}].results": task.type, dataset.type and dataset.name are required')
            elif not HUB_ID.match(dataset["type"]):
                errors.append(f'"model-index[{index}].results.dataset.type" is not a dataset id: {dataset["type"]!r}')
            if not metrics or not all(
                metric.get("type") and isinstance(metric.get("value"), (int, float)) for metric in metrics
            ):
                errors.append(f'"model-index[{index}].results.metrics": each needs a type and a numeric value')
    return errors


class HubServer:
    """The Hub's state (users, repositories, LFS objects) and the HTTP server that serves it, in a thread."""

    def __init__(self, tokens: dict[str, str], organizations: dict[str, set[str]], lfs_threshold: int = 10_000):
        self.tokens = tokens  # token -> user name
        self.organizations = organizations  # organization -> its members
        self.lfs_threshold = lfs_threshold
        self.repos: dict[str, Repository] = {}
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> content
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status) of every request answered
        self.uploads: list[dict] = []  # per commit: the token it was made with, the files it added (name -> bytes)
        self.unexpected: list[str] = []
        self.faults: list[Fault] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self))
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll interval: `shutdown` waits for the serving loop to see it.
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> "HubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def fail(self, method: str, path: str, status: int, message: str) -> None:
        """Answer the next `method` request whose path matches the regex `path` with `status` and `message`."""
        self.faults.append(Fault(method, re.compile(path), status, message))

    def files(self, repo_id: str, revision: str = DEFAULT_BRANCH) -> dict[str, StoredFile]:
        """The files of `repo_id` at `revision` (for the tests' checks)."""
        repo = self.repos[repo_id]
        return repo.commits[repo.commit_id(revision)]

    # Access rules ------------------------------------------------------------------------------------------------

    def user(self, headers) -> str | None:
        """The user the request's bearer token belongs to; None without a token, 401 for an unknown one."""
        authorization = headers.get("Authorization", "")
        if not authorization:
            return None
        token = authorization.removeprefix("Bearer ").strip()
        if token not in self.tokens:
            raise HubError(401, INVALID_TOKEN)
        return self.tokens[token]

    def member(self, user: str | None, namespace: str) -> bool:
        """Whether `user` may write to `namespace`: their own, or an organization's they belong to."""
        return user is not None and (user == namespace or user in self.organizations.get(namespace, ()))

    def readable(self, repo_id: str, headers) -> Repository:
        user = self.user(headers)
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and not self.member(user, repo.namespace)):
            status = 401 if user is None else 404
            raise HubError(status, "Repository not found", "RepoNotFound")
        return repo

    def writable(self, repo_id: str, headers) -> Repository:
        repo = self.readable(repo_id, headers)
        if not self.member(self.user(headers), repo.namespace):
            raise HubError(403, f"You don't have the rights to write to {repo_id}")
        return repo

    def commit_at(self, repo: Repository, revision: str) -> str:
        oid = repo.commit_id(revision)
        if oid is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return oid

    # Endpoints ---------------------------------------------------------------------------------------------------

    def agent_harnesses(self, request) -> dict:
        """The registry of AI agent harnesses the client fetches once a day: none here."""
        return {"standardEnvVars": [], "harnesses": {}}

    def whoami(self, request) -> dict:
        user = self.user(request.headers)
        if user is None:
            raise HubError(401, "Invalid username or password.")
        return {"type": "user", "name": user, "auth": {"type": "access_token", "accessToken": {"role": "write"}}}

    def create_repo(self, request) -> dict:
        user = self.user(request.headers)
        body = request.json()
        if user is None:
            raise HubError(401, "You must be authenticated to create a repository")
        if body.get("type", "model") != "model":
            raise NotUnderstood(f"repositories of type {body['type']!r}")
        namespace = body.get("organization") or user
        if not self.member(user, namespace):
            raise HubError(403, f'You don\'t have the rights to create a model under the namespace "{namespace}"')
        repo_id = f"{namespace}/{body['name']}"
        url = f"{self.endpoint}/{repo_id}"
        if repo_id in self.repos:
            raise HubError(409, "You already created this model repo", url=url)
        repo = Repository(repo_id, private=body.get("visibility") == "private")
        repo.add_commit({}, "initial commit", DEFAULT_BRANCH)
        self.repos[repo_id] = repo
        return {"url": url, "name": repo_id, "id": repo_id}

    def validate_yaml(self, request) -> Answer:
        errors = yaml_errors(request.json()["content"])
        return Answer({"errors": [{"message": error} for error in errors], "warnings": []}, 400 if errors else 200)

    def model_info(self, request, repo_id: str, revision: str = DEFAULT_BRANCH) -> dict:
        repo = self.readable(repo_id, request.headers)
        oid = self.commit_at(repo, revision)
        siblings = [{"rfilename": path} for path in sorted(repo.commits[oid])]
        return {"id": repo_id, "modelId": repo_id, "sha": oid, "private": repo.private, "siblings": siblings}

    def entries(self, files: dict[str, StoredFile], paths) -> list[dict]:
        """Tree entries (files and folders, as the Hub lists them) for `paths`."""
        entries = []
        for path in paths:
            if path in files:
                stored = files[path]
                entry = {"type": "file", "path": path, "size": len(stored.content), "oid": git_blob_id(stored.content)}
                if stored.lfs:
                    entry["lfs"] = {"oid": stored.etag, "size": len(stored.content), "pointerSize": 134}
                entries.append(entry)
            else:
                entries.append({"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest()})
        return entries

    def tree(self, request, repo_id: str, revision: str, folder: str = "") -> list[dict]:
        repo = self.readable(repo_id, request.headers)
        files = repo.commits[self.commit_at(repo, revision)]
        prefix = f"{folder}/" if folder else ""
        inside = [path for path in files if path.startswith(prefix)]
        if folder and not inside:
            raise HubError(404, f"{folder} does not exist", "EntryNotFound")
        listed = {path for path in {*inside, *parent_folders(inside)} if path.startswith(prefix)}
        if request.query.get("recursive", ["False"])[0].lower() != "true":
            listed = {path for path in listed if "/" not in path.removeprefix(prefix)}
        return self.entries(files, sorted(listed))

    def paths_info(self, request, repo_id: str, revision: str) -> list[dict]:
        repo = self.readable(repo_id, request.headers)
        files = repo.commits[self.commit_at(repo, revision)]
        existing = {*files, *parent_folders(files)}
        return self.entries(files, [path for path in request.form().get("paths", []) if path in existing])

    def preupload(self, request, repo_id: str, revision: str) -> dict:
        repo = self.writable(repo_id, request.headers)
        self.commit_at(repo, revision)
        files = [
            {"path": item["path"], "uploadMode": "lfs" if item["size"] > self.lfs_threshold else "regular"}
            for item in request.json()["files"]
        ]
        return {"files": [dict(item, shouldIgnore=False) for item in files]}

    def lfs_batch(self, request, repo_id: str) -> dict:
        self.writable(repo_id, request.headers)
        body = request.json()
        if body.get("operation") != "upload" or "basic" not in body.get("transfers", ["basic"]):
            raise NotUnderstood(f"LFS batch requests other than basic uploads: {body}")
        objects = []
        for item in body["objects"]:
            answer = {"oid": item["oid"], "size": item["size"], "authenticated": True}
            if item["oid"] not in self.lfs_objects:
                answer["actions"] = {
                    "upload": {"href": f"{self.endpoint}/lfs-upload/{item['oid']}/{item['size']}"},
                    "verify": {"href": f"{self.endpoint}/lfs-verify"},
                }
            objects.append(answer)
        return {"transfer": "basic", "objects": objects}

    def lfs_upload(self, request, oid: str, size: str) -> dict:
        content = request.body()
        if hashlib.sha256(content).hexdigest() != oid or len(content) != int(size):
            raise HubError(400, f"LFS object {oid}: the uploaded content does not match its oid and size")
        self.lfs_objects[oid] = content
        return {}

    def lfs_verify(self, request) -> dict:
        body = request.json()
        content = self.lfs_objects.get(body["oid"])
        if content is None or len(content) != body["size"]:
            raise HubError(404, f"LFS object {body['oid']} was not uploaded")
        return {}

    def commit(self, request, repo_id: str, revision: str) -> dict:
        repo = self.writable(repo_id, request.headers)
        files = dict(repo.commits[self.commit_at(repo, revision)])
        lines = [json.loads(line) for line in request.body().decode().splitlines() if line.strip()]
        header, operations = lines[0], lines[1:]
        if header.get("key") != "header":
            raise NotUnderstood(f"a commit that starts with {header}")
        for operation in operations:
            key, value = operation["key"], operation["value"]
            if key == "file" and value.get("encoding") == "base64":
                files[value["path"]] = StoredFile(base64.b64decode(value["content"]), lfs=False)
            elif key == "lfsFile" and value.get("algo") == "sha256":
                if value["oid"] not in self.lfs_objects:
                    raise HubError(422, f"{value['path']}: LFS object {value['oid']} was not uploaded")
                files[value["path"]] = StoredFile(self.lfs_objects[value["oid"]], lfs=True)
            elif key == "deletedFile":
                files.pop(value["path"], None)
            else:
                raise NotUnderstood(f"the commit operation {operation}")
        oid = repo.add_commit(files, header["value"]["summary"], revision)
        token = request.headers["Authorization"].removeprefix("Bearer ").strip()
        added = {operation["value"]["path"] for operation in operations if operation["key"] != "deletedFile"}
        self.uploads.append({"token": token, "files": {path: files[path].content for path in sorted(added)}})
        return {"commitUrl": f"{self.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}

    def create_branch(self, request, repo_id: str, branch: str) -> dict:
        repo = self.writable(repo_id, request.headers)
        if branch in repo.branches:
            raise HubError(409, f"Branch {branch} already exists")
        start = (request.json() or {}).get("startingPoint") or DEFAULT_BRANCH
        repo.branches[branch] = self.commit_at(repo, start)
        return {}

    def resolve(self, request, repo_id: str, revision: str, path: str) -> Answer:
        if "Range" in request.headers:
            raise NotUnderstood(f"ranges of a file ({request.headers['Range']})")
        repo = self.readable(repo_id, request.headers)
        oid = self.commit_at(repo, revision)
        stored = repo.commits[oid].get(path)
        if stored is None:
            raise HubError(
                404, f"{path} does not exist at {revision}", "EntryNotFound", headers={"X-Repo-Commit": oid}
            )
        headers = {"X-Repo-Commit": oid, "ETag": f'"{stored.etag}"', "Content-Type": "application/octet-stream"}
        if stored.lfs:
            headers.update({"X-Linked-Etag": f'"{stored.etag}"', "X-Linked-Size": str(len(stored.content))})
        return Answer(stored.content, 200, headers)


REPO = r"(?P<repo_id>[\w.-]+/[\w.-]+)"
REV = r"(?P<revision>[^/]+)"
# (method, path pattern, HubServer method); the revision and path parts are URL-decoded before the call.
ROUTES = [
    ("GET", r"/api/agent-harnesses", "agent_harnesses"),
    ("GET", r"/api/whoami-v2", "whoami"),
    ("POST", r"/api/repos/create", "create_repo"),
    ("POST", r"/api/validate-yaml", "validate_yaml"),
    ("GET", rf"/api/models/{REPO}", "model_info"),
    ("GET", rf"/api/models/{REPO}/revision/{REV}", "model_info"),
    ("GET", rf"/api/models/{REPO}/tree/{REV}(?:/(?P<folder>.+))?", "tree"),
    ("POST", rf"/api/models/{REPO}/paths-info/{REV}", "paths_info"),
    ("POST", rf"/api/models/{REPO}/preupload/{REV}", "preupload"),
    ("POST", rf"/api/models/{REPO}/commit/{REV}", "commit"),
    ("POST", rf"/api/models/{REPO}/branch/(?P<branch>[^/]+)", "create_branch"),
    ("POST", rf"/{REPO}\.git/info/lfs/objects/batch", "lfs_batch"),
    ("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})/(?P<size>\d+)", "lfs_upload"),
    ("POST", r"/lfs-verify", "lfs_verify"),
    ("GET", rf"/{REPO}/resolve/{REV}/(?P<path>.+)", "resolve"),
    ("HEAD", rf"/{REPO}/resolve/{REV}/(?P<path>.+)", "resolve"),
]


def find_route(method: str, path: str) -> tuple[str, dict] | None:
    """The endpoint that answers `method path`, and its URL-decoded arguments."""
    for route_method, pattern, endpoint in ROUTES:
        match = re.fullmatch(pattern, path)
        if route_method == method and match:
            return endpoint, {key: unquote(value) for key, value in match.groupdict().items() if value is not None}
    return None


def make_handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

        def read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)

        def body(self) -> bytes:
            return self.request_body

        def json(self):
            return json.loads(self.body() or b"null")

        def form(self) -> dict[str, list[str]]:
            return parse_qs(self.body().decode())

        def answer(self, answer: "Answer") -> None:
            data = answer.payload if isinstance(answer.payload, bytes) else json.dumps(answer.payload).encode()
            self.send_response(answer.status)
            for name, value in {"Content-Type": "application/json", **answer.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            hub.requests.append((self.command, self.path, answer.status))

        def dispatch(self) -> None:
            url = urlsplit(self.path)
            self.query = parse_qs(url.query)
            # Read the whole request before answering, errors included: the client reuses the connection.
            self.request_body = self.read_body()
            fault = next((fault for fault in hub.faults if fault.applies(self.command, url.path)), None)
            if fault is not None:
                fault.used = True
                return self.answer(Answer({"error": fault.message}, fault.status))
            route = find_route(self.command, url.path)
            if route is None:
                return self.not_understood(f"{self.command} {self.path}")
            endpoint, arguments = route
            try:
                result = getattr(hub, endpoint)(self, **arguments)
            except HubError as error:
                return self.answer(error.answer())
            except Exception as error:  # NotUnderstood, or a request shape that breaks this server's assumptions
                return self.not_understood(f"{self.command} {self.path}: {type(error).__name__}: {error}")
            self.answer(result if isinstance(result, Answer) else Answer(result))

        def not_understood(self, request: str) -> None:
            """Record the request for the test to fail on, and answer 501 (which the client does not retry)."""
            hub.unexpected.append(request)
            self.answer(Answer({"error": f"hub_server does not understand {request}"}, 501))

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = dispatch

        def log_message(self, format, *args) -> None:  # the requests are recorded in `hub.requests` instead
            pass

    return Handler
