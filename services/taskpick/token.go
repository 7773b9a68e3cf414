package taskpick

// TokenScale relates lease tokens to the backend's clock. A pick gives the task the token
// max(previous + 1, now_ms × TokenScale), and a Put stores (now_ms + 2) × TokenScale as the
// task's previous token. So tokens strictly increase while the task lives.
//
// A task whose id is put again after its Ack starts above every token its earlier life
// handed out whenever that life began in an earlier millisecond, which every life with a
// stale lease did (a lease lasts at least MinTTL): its tokens were at most
// max((p + 2) × TokenScale, t × TokenScale) plus fewer than TokenScale picks, for its Put's
// millisecond p < now_ms and picks at t ≤ now_ms (no task is picked TokenScale times in one
// millisecond: each pick is a backend round trip, and the Ack or Nack between two picks
// another). Only a life that was put, picked and acked all within the new Put's millisecond
// can share a token with the new life, and only with the worker that acked it. The scale keeps
// tokens below 2^53 until the year 2248, so Redis's Lua numbers hold them exactly.
const TokenScale = 1024

// NextToken is the token a pick at nowMillis gives a task whose previous token is prev.
func NextToken(prev uint64, nowMillis int64) uint64 {
	return max(prev+1, uint64(nowMillis)*TokenScale)
}

// PutToken is the previous token a task put at nowMillis starts with.
func PutToken(nowMillis int64) uint64 { return uint64(nowMillis+2) * TokenScale }
