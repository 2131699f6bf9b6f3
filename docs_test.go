package gantry_test

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The documentation is README.md and docs/*.md. Their links must lead somewhere in this
// repository: a file or directory that exists, and, for a link into a markdown file, a heading
// of that file (GitHub's anchors). Nothing may link outside the repository; a URL on the
// loopback address names the reader's own Gantry (`make run` listens there), not a site.

// docFiles lists the documentation checked, relative to root, with slashes.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatalf("listing docs/: %v", err)
	}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatalf("docs file %s: %v", d, err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

func TestDocsLinks(t *testing.T) {
	t.Parallel()
	files := docFiles(t, ".")
	if len(files) < 2 {
		t.Fatalf("found %v: want README.md and docs/*.md", files)
	}
	for _, p := range checkDocLinks(".", files) {
		t.Error(p)
	}
}

// TestDocsReadmeLinksEveryDoc keeps the README's Documentation list complete: each file under
// docs/ is linked from the README.
func TestDocsReadmeLinksEveryDoc(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range docLinks(string(readme)) {
		target, _, _ := strings.Cut(l.target, "#")
		linked[path.Clean(target)] = true
	}
	for _, f := range docFiles(t, ".")[1:] {
		if !linked[f] {
			t.Errorf("README.md does not link %s: add it to its Documentation list", f)
		}
	}
}

// TestDocsLinksCatches runs the check on a made-up tree, so that a check that finds nothing
// does not pass by accident.
func TestDocsLinksCatches(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Title\n\n## Quick start\n\n"+
		"[ok](docs/a.md#the-api-v2) [ok](#quick-start) [ok](docs) [ok](http://127.0.0.1:8080/)\n"+
		"[gone](docs/missing.md) [no heading](docs/a.md#nowhere) [out](https://example.com/x)\n"+
		"see <https://example.org> or https://example.net/page, not `https://in.code/span` or `a\nhttps://wrapped/span`\n"+
		"```sh\ncurl https://in.a.block/ # [not](a-link.md)\n```\n"+
		"[ref]: https://example.com/ref\n")
	write("docs/a.md", "# The API (v2)\n\n## The API (v2)\n\n"+
		"[up](../README.md#quick-start) [root-relative](README.md) [dup](#the-api-v2-1)\n"+
		"![img](../console/shot.png) [escape](../../outside.md)\n")
	got := checkDocLinks(root, []string{"README.md", "docs/a.md"})
	want := []string{
		"README.md:6: docs/missing.md: no such file or directory in the repository",
		"README.md:6: docs/a.md#nowhere: docs/a.md has no heading with anchor #nowhere",
		"README.md:6: https://example.com/x: links outside the repository",
		"README.md:7: https://example.org: links outside the repository",
		"README.md:7: https://example.net/page: links outside the repository",
		"README.md:12: https://example.com/ref: links outside the repository",
		"docs/a.md:5: README.md: no such file or directory in the repository",
		"docs/a.md:6: ../console/shot.png: no such file or directory in the repository",
		"docs/a.md:6: ../../outside.md: leaves the repository",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDocsAnchor(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Quick start":                        "quick-start",
		"Scaling, placement and cold starts": "scaling-placement-and-cold-starts",
		"Python workers (the `runpod` SDK)":  "python-workers-the-runpod-sdk",
		"What `/metrics` exposes":            "what-metrics-exposes",
		"Jobs on PostgreSQL":                 "jobs-on-postgresql",
		"The [CLI](docs/cli.md) and keys":    "the-cli-and-keys",
		"snake_case stays":                   "snake_case-stays",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// checkDocLinks returns one line per bad link in files (paths relative to root, with slashes).
func checkDocLinks(root string, files []string) []string {
	var problems []string
	anchors := map[string]map[string]bool{} // a markdown file's anchors, read once
	fileAnchors := func(rel string) (map[string]bool, error) {
		if a, ok := anchors[rel]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		anchors[rel] = headingAnchors(string(b))
		return anchors[rel], nil
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		for _, l := range docLinks(string(b)) {
			bad := func(format string, args ...any) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", f, l.line, l.target, fmt.Sprintf(format, args...)))
			}
			if u, err := url.Parse(l.target); err == nil && u.Scheme != "" {
				if !loopback(u) {
					bad("links outside the repository")
				}
				continue
			}
			target, frag, _ := strings.Cut(l.target, "#")
			rel := f
			if target != "" {
				rel = path.Join(path.Dir(f), target)
				if rel == ".." || strings.HasPrefix(rel, "../") {
					bad("leaves the repository")
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
					bad("no such file or directory in the repository")
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(rel, ".md") {
				continue
			}
			a, err := fileAnchors(rel)
			if err != nil {
				bad("%v", err)
				continue
			}
			if !a[frag] {
				bad("%s has no heading with anchor #%s", rel, frag)
			}
		}
	}
	return problems
}

// loopback reports whether u names this machine (the reader's own Gantry).
func loopback(u *url.URL) bool {
	if u.Scheme != "http" && u.Scheme != "https" {
		return false
	}
	h := u.Hostname()
	return h == "localhost" || h == "::1" || strings.HasPrefix(h, "127.")
}

type docLink struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	autoLink   = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]+)>`)
	bareURL    = regexp.MustCompile(`https?://[^\s)>\]"']+`)
	codeSpan   = regexp.MustCompile("(?s)``.*?``|`[^`]*`")
	hrefAttr   = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]+)"`)
)

// docLinks returns the links of a markdown text outside code blocks and code spans: inline
// links and images, reference definitions, autolinks, HTML href/src, and bare http(s) URLs
// (which GitHub turns into links).
func docLinks(text string) []docLink {
	// Blank fenced code blocks, then code spans (which may wrap across lines), keeping the
	// line breaks so that line numbers stay right.
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			lines[i] = ""
		}
	}
	text = codeSpan.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(span string) string {
		return strings.Repeat("\n", strings.Count(span, "\n"))
	})
	var links []docLink
	for i, line := range strings.Split(text, "\n") {
		add := func(target string) { links = append(links, docLink{line: i + 1, target: target}) }
		if m := refDef.FindStringSubmatch(line); m != nil {
			add(m[1])
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			add(m[1])
		}
		line = inlineLink.ReplaceAllString(line, "")
		for _, m := range autoLink.FindAllStringSubmatch(line, -1) {
			add(m[1])
		}
		for _, m := range hrefAttr.FindAllStringSubmatch(line, -1) {
			add(m[1])
		}
		line = hrefAttr.ReplaceAllString(autoLink.ReplaceAllString(line, ""), "")
		for _, m := range bareURL.FindAllString(line, -1) {
			add(strings.TrimRight(m, ".,;:"))
		}
	}
	return links
}

var atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)

// headingAnchors returns the anchors GitHub gives a markdown text's headings: the second
// heading with the same anchor gets "-1", the third "-2", and so on.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := anchor(m[1])
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

var linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// anchor is GitHub's anchor for a heading: its text (a link's text, not its target),
// lowercased, with letters, digits, '-' and '_' kept, spaces turned to '-', the rest dropped.
func anchor(heading string) string {
	heading = linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
