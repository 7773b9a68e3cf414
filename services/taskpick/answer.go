package taskpick

import (
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/server"
)

// Answers are bounded in bytes, so that no request can make the service build (and the
// client receive) an answer of hundreds of megabytes: 1,000 Gets of one 256 KiB task in a
// Batch, ListDead of 1,000 large dead tasks, or a Pick of 100 large tasks.

// TaskOverheadBytes bounds what one task costs in an answer besides its payload and strings:
// the field names, numbers, times, state, the lease secret and the list's punctuation.
const TaskOverheadBytes = 256

// answerSlack bounds what an answer costs besides its tasks (total, truncated, brackets).
const answerSlack = 64

// AnswerBytes bounds the bytes one task takes in an answer, in either encoding: its payload
// as base64 (JSON), its strings (id, last error) at up to 6 bytes a byte (JSON's \u escapes),
// and TaskOverheadBytes. The binary encoding is always smaller. Engines that stop reading at
// a budget (Pick, ListDead) count tasks with it.
func AnswerBytes(payloadLen, stringsLen int) int {
	return 4*((payloadLen+2)/3) + 6*stringsLen + TaskOverheadBytes
}

// MinAnswerBytes is the smallest answer limit a service accepts: one task of the largest
// payload, id and last error, so that a single Get, Pick or ListDead always fits.
var MinAnswerBytes = AnswerBytes(MaxPayloadBytes, server.MaxKeyBytes+MaxReasonBytes) + answerSlack

// DefaultMaxAnswerBytes is the answer limit when Config leaves it unset.
const DefaultMaxAnswerBytes = server.MaxResponseBytes

// putTaskBytes bounds what one task of a Put costs in its answer, in either encoding: its
// created and duplicate flags and existing state, and for a task with a unique key the id
// of a task holding the key (at most server.MaxKeyBytes, 6 bytes a byte in JSON).
func putTaskBytes(t *taskpickv1.NewTask) int {
	if t.GetUniqueKey() == "" {
		return 24
	}
	return 24 + 6*server.MaxKeyBytes
}

// checkPutAnswer refuses a Put whose answer could pass the answer limit: only one with many
// tasks with unique keys under a small configured limit can.
func (s *Service) checkPutAnswer(tasks []*taskpickv1.NewTask) error {
	n := answerSlack
	for _, t := range tasks {
		n += putTaskBytes(t)
	}
	if n > s.maxAnswer {
		return server.InvalidField("tasks", "could answer %d bytes, over the service's answer limit of %d: send fewer tasks with unique keys per Put", n, s.maxAnswer)
	}
	return nil
}
