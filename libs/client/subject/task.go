package subject

import "strings"

// TaskPrefix starts every task-pick event subject:
//
//	coordkit.taskpick.v1.available.<backend>.<pool token>
const TaskPrefix = "coordkit.taskpick.v1"

// TaskAvailable is the subject of the events that say tasks became available in one pool of
// one backend.
func TaskAvailable(backend, pool string) string {
	return TaskPrefix + ".available." + Token(backend) + "." + Token(pool)
}

// TaskAvailablePattern subscribes to the available events of every pool of backend ("*" for
// every backend).
func TaskAvailablePattern(backend string) string {
	if backend != "*" {
		backend = Token(backend)
	}
	return TaskPrefix + ".available." + backend + ".>"
}

// ParseTaskAvailable splits an available-event subject into its backend and pool; ok is
// false for a subject that TaskAvailable did not make.
func ParseTaskAvailable(subj string) (backend, pool string, ok bool) {
	rest, found := strings.CutPrefix(subj, TaskPrefix+".available.")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 2 {
		return "", "", false
	}
	b, err1 := ParseToken(parts[0])
	p, err2 := ParseToken(parts[1])
	if err1 != nil || err2 != nil {
		return "", "", false
	}
	return b, p, true
}
