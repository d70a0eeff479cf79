package main

import (
	"os"
	"syscall"
	"testing"
)

type fileStat struct{ size, blocks int64 }

func mustStat(t *testing.T, path string) fileStat {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	return fileStat{size: info.Size(), blocks: st.Blocks}
}
