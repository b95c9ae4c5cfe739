package testutil

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// StartCommand starts argv with env added to this process's environment
// and stops it when the test ends: an interrupt, then a kill if it has
// not exited within 5 s.
func StartCommand(t testing.TB, argv, env []string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}
