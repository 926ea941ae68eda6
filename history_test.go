package pagedkv

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// historyPatterns are the phrases that date a text instead of explaining
// it: work periods, run numbers, issue numbers, attempt history and the
// names of the measurement logs that recorded them. README, docs, comments,
// kernel sources, scripts and CLI help say what the code is and why, for a
// reader who meets it today; a measurement is a reason when it names the GPU
// and the date ("H200, 2026-12-02"), never the session or run it came from.
// History lives in git.
//
// Each pattern is narrow enough to leave ordinary prose and code alone:
// "run" and "runs" followed by a number match only where the number ends a
// reference (before ")", ",", ";", ":", "]", "'s", a full stop or the end of
// the line, or "and"/"to"/"-" another number), so "runs 32 goroutines",
// "run 4 warps" and "runs 10-20% slower" do not; a bare "#12" matches only
// after a space, a bracket or the start of a line, so "golang/go#75804" and
// "%#x" do not.
var historyPatterns = []struct {
	name string
	re   *regexp.Regexp
}{
	// "session 21", "sessions 2-4", "the session-18 loop".
	{"work period", regexp.MustCompile(`(?i)\bsessions?[\s-]+\d+`)},
	// "run 5", "(runs 2–4)", "runs 18 and 19", "Run 5's".
	{"run number", regexp.MustCompile(`(?i)\bruns?\s+\d+(?:\s*(?:[-–,]|and|to)\s*\d+)*(?:'s\b|[)\]:;,]|\.(?:\s|$)|$)`)},
	// "issue 11", "issue #12", "issues 3 and 4".
	{"issue number", regexp.MustCompile(`(?i)\bissues?\s+#?\d+`)},
	// Identifiers named after one: "TestIssue12Overflows".
	{"issue number", regexp.MustCompile(`Issue_?\d+`)},
	// A bare issue or pull-request reference: "(#12)", "see #4".
	{"issue number", regexp.MustCompile(`(?:^|[\s(\[])#\d{1,5}\b`)},
	// "we tried", "the first attempt", "an earlier attempt".
	{"attempt history", regexp.MustCompile(`(?i)\bwe\s+(?:tried|attempted)\b|\b(?:first|second|third|earlier|previous|failed|last)\s+attempts?\b`)},
	// Measurement logs named by date and work period or run:
	// "bench-h200-2026-12-02-s21-run5.txt".
	{"measurement log", regexp.MustCompile(`\d{4}-\d{2}-\d{2}-s\d+\b|(?i:\bs\d+-runs?\d+)`)},
	// The diary files that held the history.
	{"history file", regexp.MustCompile(`docs/(?:perf-notes|measurements)\b`)},
}

// historySkip says which files the scan leaves out: this file (its patterns
// and their examples), the license, generated PTX and machine code, and
// dependency checksums.
func historySkip(path string) bool {
	switch {
	case path == "history_test.go", path == "LICENSE", path == "go.sum":
		return true
	case strings.HasPrefix(path, "ptx/") && (strings.HasSuffix(path, ".ptx") || strings.HasSuffix(path, ".gz")):
		return true
	}
	return false
}

// historyFiles lists the repository's text files, relative to the root: the
// files git tracks plus the untracked ones it does not ignore, or, without
// git, every file under the root but .git.
func historyFiles(t *testing.T) []string {
	t.Helper()
	if out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, filepath.ToSlash(f))
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		files = append(files, filepath.ToSlash(path))
		return nil
	})
	require.NoError(t, err)
	return files
}

// historyFindings returns "path:line: kind: text" for every line of data
// that a history pattern matches.
func historyFindings(path string, data []byte) []string {
	var found []string
	for i, line := range strings.Split(string(data), "\n") {
		for _, p := range historyPatterns {
			if m := p.re.FindString(line); m != "" {
				found = append(found, path+":"+strconv.Itoa(i+1)+": "+p.name+": "+strings.TrimSpace(m))
				break
			}
		}
	}
	return found
}

// TestNoHistory keeps the repository's text free of history: README, docs,
// Go comments and CLI help, kernel sources and scripts explain the code as
// it is (see historyPatterns). Binary files and files deleted from the
// working tree are skipped.
func TestNoHistory(t *testing.T) {
	files := historyFiles(t)
	require.NotEmpty(t, files)
	var found []string
	scanned := 0
	for _, path := range files {
		if historySkip(path) {
			continue
		}
		data, err := os.ReadFile(filepath.FromSlash(path))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet staged
		}
		require.NoError(t, err)
		if bytes.IndexByte(data, 0) >= 0 {
			continue // binary
		}
		scanned++
		found = append(found, historyFindings(path, data)...)
	}
	require.Positive(t, scanned)
	assert.Empty(t, found, "history in the text (say what the code is and why, with GPU and date for a measurement; history lives in git):\n%s", strings.Join(found, "\n"))
}

// TestHistoryPatterns pins what the patterns catch and what they leave alone.
func TestHistoryPatterns(t *testing.T) {
	for _, tc := range []struct {
		line string
		hit  bool
	}{
		{"// measured in session 21", true},
		{"the session-18 loop", true},
		{"Run 5, in the same call", true},
		{"(session 4 run 19).", true},
		{"session 4 runs 18 and 19)", true},
		{"(runs 2–4) and not kept", true},
		{"Run 5's eager rows", true},
		{"// cost up to 18% (run 4)", true},
		{"issue 11's targets", true},
		{"(issue #12)", true},
		{"func TestIssue12Overflows(t *testing.T) {", true},
		{"fixed in #42", true},
		{"we tried a deeper ring", true},
		{"the first attempt spilled", true},
		{"`docs/measurements/bench-h200-2026-12-02-s21-run5.txt`", true},
		{"see docs/perf-notes.md", true},
		{"host-and-load-h200-2026-12-01-s8.txt", true},

		{"// TestConcurrentUse runs 32 goroutines over 8 streams", false},
		{"a block can run 4 warps at once", false},
		{"the decode runs 10-20% slower", false},
		{"x-split and shuffle loop only ran 1–3.8% slower", false},
		{"runs 3.6% slower at 8×2048", false},
		{"(golang/go#75804)", false},
		{`fmt.Sprintf("%#x", v)`, false},
		{"measured on H200, 2026-12-02", false},
		{"the ring's stages: 2..4", false},
		{"STEPS=sanitize-all runs every GPU test", false},
		{"const ROWS_PER_ISSUE = 4;", false},
		{"// issue starts the copy of tile i", false},
	} {
		got := historyFindings("f", []byte(tc.line))
		if tc.hit {
			assert.NotEmpty(t, got, "%q should match", tc.line)
		} else {
			assert.Empty(t, got, "%q should not match", tc.line)
		}
	}
}
