"""A real browser for the pages flowrun writes (flowrun report): Debian's chromium, headless.

`Browser.open(path)` loads a page from its file, as a person opens an attachment, and gives back
the DOM after its script ran (--dump-dom), parsed into Elements, and every line the page wrote to
the browser's console (--enable-logging=stderr prints them as `INFO:CONSOLE...`: a JavaScript
error, a console.error or a resource that failed to load). `screenshot` keeps a PNG of it."""
import html.parser
import os
import shutil
import subprocess

# No sandbox: CI runs the suite as root, where chromium refuses its sandbox.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--mute-audio"]


def chromium():
    """The chromium binary, or None when it is not installed (apt-get install chromium)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Element:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.children, self.text = [], ""

    def classes(self):
        return (self.attrs.get("class") or "").split()

    def all_text(self):
        return self.text + "".join(c.all_text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find_all(self, tag=None, cls=None, **attrs):
        """Elements below (and including) this one of `tag`, with class `cls`, and each attribute
        given (data_rank="2" is data-rank="2"; True: present)."""
        out = []
        for e in self.walk():
            if tag and e.tag != tag or cls and cls not in e.classes():
                continue
            if all((k.replace("_", "-") in e.attrs) if v is True else e.attrs.get(k.replace("_", "-")) == v
                   for k, v in attrs.items()):
                out.append(e)
        return out

    def by_id(self, ident):
        found = [e for e in self.walk() if e.attrs.get("id") == ident]
        return found[0] if found else None


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", [], None)
        self.at = self.root

    def handle_starttag(self, tag, attrs):
        e = Element(tag, attrs, self.at)
        self.at.children.append(e)
        if tag not in VOID:
            self.at = e

    def handle_startendtag(self, tag, attrs):
        self.at.children.append(Element(tag, attrs, self.at))

    def handle_endtag(self, tag):
        e = self.at
        while e is not None and e.tag != tag:
            e = e.parent
        if e is not None and e.parent is not None:
            self.at = e.parent

    def handle_data(self, data):
        self.at.children.append(Element("#text", [], self.at))
        self.at.children[-1].text = data


def parse(text):
    p = _Parser()
    p.feed(text)
    return p.root


class Browser:
    def __init__(self, binary, scratch, timeout=60):
        self.binary, self.timeout = binary, timeout
        # A profile of its own, so that no other chromium's lock or state is in the way.
        self.profile = os.path.join(scratch, "chromium-profile")

    def _run(self, args):
        argv = [self.binary, *FLAGS, f"--user-data-dir={self.profile}", *args]
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                              timeout=self.timeout)

    def open(self, path, fragment=""):
        """(DOM root, console lines, chromium's exit code) of the page at `path`."""
        url = "file://" + os.path.abspath(path) + (f"#{fragment}" if fragment else "")
        p = self._run(["--enable-logging=stderr", "--v=0", "--dump-dom", url])
        console = [line for line in p.stderr.splitlines() if ":CONSOLE" in line]
        return parse(p.stdout), console, p.returncode

    def screenshot(self, path, png, width=1280, height=900):
        """Writes the page's first `height` pixels to `png`; returns whether the file is there."""
        url = "file://" + os.path.abspath(path)
        self._run([f"--window-size={width},{height}", f"--screenshot={png}", url])
        return os.path.exists(png) and os.path.getsize(png) > 0
