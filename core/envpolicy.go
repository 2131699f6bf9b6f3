package core

import (
	"fmt"
	"strings"
)

// This file is the rule on which environment variables a tenant may give a worker (an
// endpoint's or a template's env). docs/worker-env.md explains it for users.
//
// On the process pool a worker is a process of the server's machine running a command the
// operator chose; a tenant chooses only its env and args. A variable that makes the dynamic
// loader, a shell or an interpreter load code, or makes a library run a command, would let the
// tenant run code of their own there instead: LD_PRELOAD loads a library into the worker,
// PYTHONWARNINGS=ignore::antigravity.x imports a module whose import opens BROWSER, a command
// line. Such names are refused at create and update, on every pool: an endpoint may move
// between pools, and a template serves any of them.

// refusedEnvPrefixes are the prefixes of refused names, each with why.
var refusedEnvPrefixes = []struct{ prefix, why string }{
	{"LD_", "the dynamic loader reads it (LD_PRELOAD, LD_LIBRARY_PATH and LD_AUDIT load libraries into the worker)"},
	{"DYLD_", "the dynamic loader reads it (it loads libraries into the worker)"},
	{"BASH_FUNC_", "bash imports it as a shell function"},
	{"GIT_CONFIG", "git reads configuration from it, which can name commands git runs"},
	{"LUA_INIT", "Lua runs it as code when it starts"},
	{"LUA_PATH", "Lua loads modules from where it says"},
	{"LUA_CPATH", "Lua loads native modules from where it says"},
	{"R_PROFILE", "R runs the file it names when it starts"},
	{"R_ENVIRON", "R reads start-up settings from the file it names"},
}

// refusedEnvNames are the refused names outside those prefixes, each with why.
var refusedEnvNames = map[string]string{
	// The C library.
	"GCONV_PATH":      "iconv loads character-set modules (shared libraries) from where it says",
	"GLIBC_TUNABLES":  "it changes how the C library's allocator and loader behave, and has been a way into the loader",
	"LOCPATH":         "the C library loads locale data from where it says",
	"NLSPATH":         "the C library reads message catalogs from where it says",
	"HOSTALIASES":     "the resolver reads host aliases from the file it names",
	"OPENSSL_CONF":    "OpenSSL reads a configuration that can load engines and providers (shared libraries)",
	"OPENSSL_ENGINES": "OpenSSL loads engines (shared libraries) from where it says",
	"OPENSSL_MODULES": "OpenSSL loads providers (shared libraries) from where it says",
	// Shells.
	"BASH_ENV":       "bash runs the file it names before a script",
	"ENV":            "sh runs the file it names when it starts",
	"SHELLOPTS":      "it turns on bash options (xtrace with PS4 runs code)",
	"BASHOPTS":       "it turns on bash options",
	"PS4":            "bash expands it, command substitutions included, for each traced command",
	"PROMPT_COMMAND": "bash runs it as a command",
	"IFS":            "it changes how a shell splits words",
	// Interpreters that load code by name or from a path before the program runs. PYTHON* is
	// refused as a family but for the names in allowedPythonEnv.
	"NODE_OPTIONS":              "Node.js reads command-line options from it (--require loads a module)",
	"NODE_PATH":                 "Node.js loads modules from where it says",
	"NODE_REPL_EXTERNAL_MODULE": "Node.js loads the module it names instead of its REPL",
	"PERL5OPT":                  "Perl reads command-line options from it (-M loads a module)",
	"PERL5LIB":                  "Perl loads modules from where it says",
	"PERLLIB":                   "Perl loads modules from where it says",
	"PERL5DB":                   "Perl runs it as the debugger's code",
	"RUBYOPT":                   "Ruby reads command-line options from it (-r loads a library)",
	"RUBYLIB":                   "Ruby loads libraries from where it says",
	"JAVA_TOOL_OPTIONS":         "the JVM reads options from it (-javaagent loads code)",
	"_JAVA_OPTIONS":             "the JVM reads options from it (-javaagent loads code)",
	"JDK_JAVA_OPTIONS":          "the java launcher reads options from it (-javaagent loads code)",
	"CLASSPATH":                 "the JVM loads classes from where it says",
	"PHPRC":                     "PHP reads its configuration from where it says (auto_prepend_file runs code)",
	"PHP_INI_SCAN_DIR":          "PHP reads configuration from where it says (auto_prepend_file runs code)",
	"GODEBUG":                   "it changes the Go runtime's and standard library's behaviour, security settings included, in Gantry's own built-in workers",
	"GOCOVERDIR":                "Gantry's built-in workers write coverage files where it says",
	// Commands that libraries and tools run on their own.
	"BROWSER":           "Python's webbrowser module runs it as a command line",
	"PAGER":             "tools run it as a command",
	"MANPAGER":          "tools run it as a command",
	"EDITOR":            "tools run it as a command",
	"VISUAL":            "tools run it as a command",
	"LESSOPEN":          "less runs it as a command",
	"LESSCLOSE":         "less runs it as a command",
	"SSH_ASKPASS":       "ssh runs it as a command",
	"GIT_ASKPASS":       "git runs it as a command",
	"GIT_SSH":           "git runs it as a command",
	"GIT_SSH_COMMAND":   "git runs it as a command",
	"GIT_EXEC_PATH":     "git runs its helpers from where it says",
	"GIT_PROXY_COMMAND": "git runs it as a command",
	"GIT_EXTERNAL_DIFF": "git runs it as a command",
	"GIT_PAGER":         "git runs it as a command",
	"GIT_EDITOR":        "git runs it as a command",
	"GIT_TEMPLATE_DIR":  "git copies hooks (commands) from where it says",
}

// allowedPythonEnv are the PYTHON* names a tenant may set: they tune the interpreter and load
// nothing by name or path. Every other PYTHON* name is refused (PYTHONPATH, PYTHONHOME,
// PYTHONSTARTUP, PYTHONWARNINGS, PYTHONBREAKPOINT, PYTHONUSERBASE, PYTHONINSPECT, ...), as are
// names Python adds later until they are looked at.
var allowedPythonEnv = map[string]bool{
	"PYTHONUNBUFFERED": true, "PYTHONDONTWRITEBYTECODE": true, "PYTHONIOENCODING": true,
	"PYTHONHASHSEED": true, "PYTHONUTF8": true, "PYTHONFAULTHANDLER": true, "PYTHONOPTIMIZE": true,
	"PYTHONNOUSERSITE": true, "PYTHONSAFEPATH": true, "PYTHONINTMAXSTRDIGITS": true,
	"PYTHONTRACEMALLOC": true, "PYTHONDEVMODE": true, "PYTHONASYNCIODEBUG": true,
	"PYTHONCOERCECLOCALE": true, "PYTHONMALLOC": true, "PYTHONVERBOSE": true,
	"PYTHONPROFILEIMPORTTIME": true, "PYTHONNODEBUGRANGES": true, "PYTHONWARNDEFAULTENCODING": true,
	"PYTHON_CPU_COUNT": true, "PYTHON_GIL": true, "PYTHON_JIT": true, "PYTHON_COLORS": true,
}

// RefusedEnv reports whether a tenant may not give a worker the environment variable name,
// and why (a phrase: "the dynamic loader reads it ..."). Names compare without regard to case.
func RefusedEnv(name string) (why string, refused bool) {
	n := strings.ToUpper(name)
	if why, ok := refusedEnvNames[n]; ok {
		return why, true
	}
	for _, p := range refusedEnvPrefixes {
		if strings.HasPrefix(n, p.prefix) {
			return p.why, true
		}
	}
	if strings.HasPrefix(n, "PYTHON") && !allowedPythonEnv[n] {
		return "Python reads it when it starts (PYTHONPATH, PYTHONSTARTUP and PYTHONWARNINGS load code); only the PYTHON* names that load nothing are allowed", true
	}
	return "", false
}

// checkEnvPolicy refuses the env names RefusedEnv names, one error per name at $.env.NAME.
func checkEnvPolicy(env map[string]string) []FieldError {
	var errs []FieldError
	for _, k := range sortedKeys(env) {
		if why, refused := RefusedEnv(k); refused {
			errs = append(errs, FieldError{"$.env." + k, fmt.Sprintf("%s is refused: %s; a worker's env may not change how its program is loaded or run (see docs/worker-env.md)", k, why)})
		}
	}
	return errs
}
