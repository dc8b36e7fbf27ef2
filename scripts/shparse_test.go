package scripts

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// A conservative reader of the scripts' environment, for TestContract*. It
// does not parse bash; it looks for what a variable read looks like in these
// scripts, written as they are (tabs, one function per `name() {` ...
// `}` at the start of a line, UPPER_CASE for the environment and for the
// scripts' own constants, lower case for everything else):
//
//   - `$NAME` and `${NAME...}` (not `${!name}`, `${#name}`: indirection and
//     lengths are no reads of NAME);
//   - bare NAME inside arithmetic, `(( ... ))` and `$(( ... ))`;
//   - the arguments of `require_env A B C`, the first of `require_int NAME
//     MIN` (lib.sh reads them by indirection);
//
// in the script's lines that are not comments, plus what it uses of lib.sh:
// lib.sh's code outside functions and assignments always (it is sourced),
// each lib.sh function the script calls (its name where a command starts),
// each lib.sh top-level NAME=... the script reads, and so on, transitively.
// A NAME the script (or the lib.sh code it uses) assigns itself, NAME=...
// with a right-hand side that does not read NAME, is its own and no read of
// the environment: `STATE_FILE="$STATE_DIR/..."` is, `STATE_DIR=${STATE_DIR:-/tmp}`
// is not. Lower-case names are never the environment here. Bash's and
// Perl's own names are left out by notEnv.
//
// It errs on the side of finding too much (a lib.sh function named where a
// command starts counts as called even if the branch never runs), so a miss
// in the table shows up as a failure rather than as silence.

// notEnv are upper-case names the scripts read that are not their
// environment's contract, with the reason.
var notEnv = map[string]string{
	"PATH":          "lib.sh puts the server's bin directory first; the image's PATH, not the function's",
	"SECONDS":       "bash: seconds since the shell started",
	"BASHPID":       "bash: the current (sub)shell's process id",
	"BASH_REMATCH":  "bash: the groups of the last =~ match",
	"BASH_SOURCE":   "bash: the script's own path",
	"EPOCHREALTIME": "bash: the wall clock, lib.sh now_ms's fallback",
}

var (
	// ${NAME, ${NAME:-x}, $NAME; not ${!name} or ${#name}.
	reRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	// ${NAME:-default}, for TestContractDefaults.
	reDefault = regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*):-([^}]*)\}`)
	// $DIR/file and ${DIR:-x}/file: a file in a directory named by a variable.
	reFile = regexp.MustCompile(`\$\{?([A-Z][A-Z0-9_]*)(?::-[^}]*)?\}?/([A-Za-z0-9_.-]+)`)
	// An assignment where a command starts (or after local/declare).
	reAssign = regexp.MustCompile(`(?m)(?:^|[;&|]|\b(?:local|declare|export|readonly)(?:\s+-[a-zA-Z]+)*)\s*([A-Z][A-Z0-9_]*)(?:\[[^\]]*\])?=(.*)$`)
	// require_env A B C; require_int NAME MIN.
	reRequireEnv = regexp.MustCompile(`\brequire_env((?:[ \t]+[A-Z][A-Z0-9_]*)+)`)
	reRequireInt = regexp.MustCompile(`\brequire_int[ \t]+([A-Z][A-Z0-9_]*)`)
	reUpper      = regexp.MustCompile(`\b[A-Z][A-Z0-9_]*\b`)
	// A lib.sh function definition and its end.
	reFunc    = regexp.MustCompile(`^([a-z_][a-z0-9_]*)\(\) \{$`)
	reTopVar  = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=`)
	reComment = regexp.MustCompile(`^\s*#`)
)

// code is a script's text without its comment lines.
func code(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if !reComment.MatchString(line) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// header is the script's leading comment block (after the shebang).
func header(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "#") {
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// library is lib.sh cut into what a script may use of it.
type library struct {
	always string            // code outside functions and top-level assignments
	funcs  map[string]string // function name → body
	vars   map[string]string // top-level NAME → its assignment line
	// callers[fn] matches a call of fn (calls).
	callers map[string]*regexp.Regexp
}

func parseLibrary(text string) library {
	lib := library{funcs: map[string]string{}, vars: map[string]string{}}
	var always strings.Builder
	name, body := "", strings.Builder{}
	for line := range strings.Lines(code(text)) {
		l := strings.TrimRight(line, "\n")
		switch {
		case name != "":
			if l == "}" {
				lib.funcs[name] = body.String()
				name = ""
				body.Reset()
				continue
			}
			body.WriteString(line)
		case reFunc.MatchString(l):
			name = reFunc.FindStringSubmatch(l)[1]
		case reTopVar.MatchString(l):
			lib.vars[reTopVar.FindStringSubmatch(l)[1]] = line
		default:
			always.WriteString(line)
		}
	}
	lib.always = always.String()
	lib.callers = map[string]*regexp.Regexp{}
	for fn := range lib.funcs {
		lib.callers[fn] = regexp.MustCompile(callRE + fn + `\b`)
	}
	return lib
}

// callRE matches where a command starts: a line's start, after ; & | ( {
// ! or a quote (trap '...'), after $( and after a keyword.
const callRE = `(?m)(?:^|[;&|({!']|\$\(|\b(?:then|do|else|if|elif|while|until|exec|time)\s)\s*`

// calls is whether text runs function fn: its name where a command starts.
func (lib library) calls(text, fn string) bool {
	return lib.callers[fn].MatchString(text)
}

// used is the script's code and the parts of lib.sh it uses, transitively.
func (lib library) used(script string) string {
	text := code(script) + lib.always
	seenF, seenV := map[string]bool{}, map[string]bool{}
	for {
		grew := false
		for _, fn := range slices.Sorted(maps.Keys(lib.funcs)) {
			if !seenF[fn] && lib.calls(text, fn) {
				seenF[fn], grew = true, true
				text += lib.funcs[fn]
			}
		}
		refs := names(text)
		for _, v := range slices.Sorted(maps.Keys(lib.vars)) {
			if !seenV[v] && refs[v] {
				seenV[v], grew = true, true
				text += lib.vars[v]
			}
		}
		if !grew {
			return text
		}
	}
}

// names are the upper-case names text reads (see the package's comment
// above), before own assignments and notEnv are taken out.
func names(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range reRef.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	for _, expr := range arithmetic(text) {
		for _, n := range reUpper.FindAllString(expr, -1) {
			out[n] = true
		}
	}
	for _, m := range reRequireEnv.FindAllStringSubmatch(text, -1) {
		for n := range strings.FieldsSeq(m[1]) {
			out[n] = true
		}
	}
	for _, m := range reRequireInt.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	for n := range out {
		if !reUpper.MatchString(n) || reUpper.FindString(n) != n {
			delete(out, n)
		}
	}
	return out
}

// reArith finds where arithmetic starts: $(( anywhere, (( where a command
// starts or after for (SQL's coalesce((SELECT ...)) is no arithmetic).
var reArith = regexp.MustCompile(`\$\(\(|(?m)(?:^|[;&|!{]|\b(?:for|if|elif|while|until|then|do|else|return))\s*\(\(`)

// arithmetic are the insides of every (( ... )) in text.
func arithmetic(text string) []string {
	var out []string
	for _, loc := range reArith.FindAllStringIndex(text, -1) {
		i := loc[1] - 2
		depth, j := 2, i+2
		for ; j < len(text) && depth > 0; j++ {
			switch text[j] {
			case '(':
				depth++
			case ')':
				depth--
			}
		}
		out = append(out, text[i+2:max(i+2, j-2)])
	}
	return out
}

// own are the names text assigns without reading them on the right-hand
// side: the script's own variables and constants.
func own(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range reAssign.FindAllStringSubmatch(text, -1) {
		self := regexp.MustCompile(`\$\{?` + m[1] + `\b`)
		if !self.MatchString(m[2]) {
			out[m[1]] = true
		}
	}
	return out
}

// envReads is what a script reads of its environment: the names its used
// text (library.used) reads, but its own and notEnv.
func envReads(text string) map[string]bool {
	out := names(text)
	for n := range own(text) {
		delete(out, n)
	}
	for n := range notEnv {
		delete(out, n)
	}
	return out
}

// fileReads are the files a script's used text reads in the directories
// dirs name: directory variable → file names.
func fileReads(text string, dirs map[string]bool) map[string][]string {
	out := map[string][]string{}
	for _, m := range reFile.FindAllStringSubmatch(text, -1) {
		if dirs[m[1]] && !slices.Contains(out[m[1]], m[2]) {
			out[m[1]] = append(out[m[1]], m[2])
		}
	}
	for d := range out {
		slices.Sort(out[d])
	}
	return out
}

// defaults are the ${NAME:-default} a script's used text writes: name →
// every default written for it.
func defaults(text string) map[string][]string {
	out := map[string][]string{}
	for _, m := range reDefault.FindAllStringSubmatch(text, -1) {
		if !slices.Contains(out[m[1]], m[2]) {
			out[m[1]] = append(out[m[1]], m[2])
		}
	}
	return out
}
