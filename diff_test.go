package main

import "github.com/google/go-cmp/cmp"

// lineDiff shows a readable diff of two texts.
func lineDiff(want, got string) string { return cmp.Diff(want, got) }
