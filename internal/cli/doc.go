// Package cli parses a command's flags the way every hpctrain command does:
// -h prints the full usage, on standard output where main says so
// (HelpOutput), and is not an error; a bad flag is one line
// naming it and pointing to -h, never the whole usage, and is an error of
// kind Usage (exit code 2 in main). NotRegular words what a path is where a
// command wanted a file.
package cli
