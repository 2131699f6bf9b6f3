package core

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// checkNames refuses control characters (Unicode category Cc: NUL, ESC, DEL and the C1
// range, tab and newline included) and invalid UTF-8 in the short text a tenant names a
// resource with and that clients print as it is: the name, the image and the registry
// credential id. A name that carried ESC would otherwise drive the terminal of whoever lists
// it. Each failure names its field.
func checkNames(name string, c *Container) []FieldError {
	var errs []FieldError
	check := func(path, s string) {
		if msg := nameProblem(s); msg != "" {
			errs = append(errs, FieldError{Path: path, Message: msg})
		}
	}
	check("$.name", name)
	if c != nil {
		check("$.image", c.Image)
		if c.Registry != nil {
			check("$.registry", *c.Registry)
		}
	}
	return errs
}

// nameProblem says what is wrong with s as a name, or "" when nothing is.
func nameProblem(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validAt(s, i):
			return fmt.Sprintf("is not valid UTF-8 (byte %d)", i)
		case unicode.IsControl(r):
			return fmt.Sprintf("holds the control character %U at byte %d; names may not hold control characters", r, i)
		}
	}
	return ""
}

// validAt reports whether s holds a real U+FFFD at byte i, not an invalid byte.
func validAt(s string, i int) bool {
	r, size := utf8.DecodeRuneInString(s[i:])
	return r == utf8.RuneError && size == 3
}
