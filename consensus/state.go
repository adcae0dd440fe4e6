package consensus

import "strconv"

// Lifecycle is the run state of spec §4. `created` is never observable: a
// start input creates the run and moves it to running in the same step.
type Lifecycle uint8

// Lifecycle values (persisted in the state encoding: never renumber).
const (
	LifeRunning    Lifecycle = 1
	LifeFinalizing Lifecycle = 2
	LifeFinished   Lifecycle = 3
	LifeFailed     Lifecycle = 4
)

// String returns argue's name for the state.
func (l Lifecycle) String() string {
	switch l {
	case LifeRunning:
		return "running"
	case LifeFinalizing:
		return "finalizing"
	case LifeFinished:
		return "finished"
	case LifeFailed:
		return "failed"
	}
	return "unknown"
}

type taskStatus uint8

// Task slot statuses (persisted: never renumber).
const (
	taskPending   taskStatus = 0
	taskCompleted taskStatus = 1
	taskTimedOut  taskStatus = 2
	taskFailed    taskStatus = 3
)

// taskSlot is one dispatched round task, in dispatch order.
type taskSlot struct {
	id     string
	pid    string
	due    int64 // per-task timer (absolute ms)
	status taskStatus
	output *Output // completed only
}

// roundState is the round being waited on.
type roundState struct {
	phase     Phase
	round     int
	startedAt int64
	timerDue  int64
	tasks     []taskSlot
	pending   int
	timedOut  int
	failed    int
}

// pendingTask is an outstanding report or action task.
type pendingTask struct {
	id  string
	pid string
	due int64
}

// State is the complete state of one run. It is a plain value: Apply mutates
// it in place (see Apply), EncodeState/DecodeState move it through Raft
// snapshots, and two replicas that applied the same inputs hold states whose
// encodings are byte-identical. A State must be used by one goroutine at a
// time; Clone makes an independent copy.
type State struct {
	sessionID string
	req       *Request
	startedAt int64
	life      Lifecycle

	active       []bool // by participant index
	activeCount  int
	eliminations []Elimination

	catalog []Claim
	index   claimIndex // claimId -> catalog position; derived, not encoded

	rounds    []RoundRecord
	prevRound int // index into rounds feeding peerRoundInputs, -1 for none
	cur       *roundState

	interrupted     bool
	interruptReason string
	deadlineHit     bool
	earlyStopped    bool
	totalTurns      int
	waitTimeouts    int
	eventCount      int64

	report       *FinalReport // set once composed
	reportTask   *pendingTask
	finalizingAt int64
	actionTask   *pendingTask
	action       *ActionOutput
	failure      *Failure
	finishedAt   int64

	viewCache *runView // derived once the final vote is over; not encoded
	// taskCatalogs caches taskCatalog for the initial phase [0] and the
	// later ones [1] until the catalog changes; derived, not encoded.
	taskCatalogs [2][]Claim
	// catalogShared: a slice of catalog itself was handed out (tasks,
	// results); derived, not encoded. See sharedCatalog.
	catalogShared bool
}

// SessionID returns the run's session id.
func (s *State) SessionID() string { return s.sessionID }

// Request returns the run's normalised request. Callers must not modify it.
func (s *State) Request() *Request { return s.req }

// Lifecycle returns the run state.
func (s *State) Lifecycle() Lifecycle { return s.life }

// Done reports whether the run reached finished or failed.
func (s *State) Done() bool { return s.life == LifeFinished || s.life == LifeFailed }

// EventCount returns how many events the run has emitted; the next event's
// Seq equals it. Event ids derived from (sessionId, seq) are identical on
// every replica.
func (s *State) EventCount() int64 { return s.eventCount }

// Failure returns the failure of a failed run, or nil.
func (s *State) Failure() *Failure { return s.failure }

// OutstandingTasks lists the tasks the engine is still waiting for, in a
// deterministic order, so a new leader can re-send them.
func (s *State) OutstandingTasks() []*Task {
	var out []*Task
	if s.cur != nil {
		out = s.pendingRoundTasks(s.cur)
	}
	if s.reportTask != nil {
		out = append(out, s.buildReportTask(s.reportTask))
	}
	if s.actionTask != nil {
		out = append(out, s.buildActionTask(s.actionTask))
	}
	return out
}

// Result rebuilds the result of a finished run, or returns nil.
func (s *State) Result() *Result {
	if s.life != LifeFinished {
		return nil
	}
	return s.finalResult()
}

// ActiveParticipants returns the ids of the active set in request order.
func (s *State) ActiveParticipants() []string {
	out := make([]string, 0, s.activeCount)
	for i, p := range s.req.Participants {
		if s.active[i] {
			out = append(out, p.ID)
		}
	}
	return out
}

func (s *State) isActive(pid string) bool {
	i := s.req.participantIndex(pid)
	return i >= 0 && s.active[i]
}

func (s *State) minParticipants() int { return int(s.req.ParticipantsPolicy.MinParticipants) }

// Deterministic identifiers. Task ids follow `<sessionId>/r<round>/<pid>`;
// timer ids contain '#', which no task id can have in that position.
func (s *State) roundTaskID(round int, pid string) string {
	return s.sessionID + "/r" + strconv.Itoa(round) + "/" + pid
}
func (s *State) roundTimerID(round int) string {
	return s.sessionID + "/r" + strconv.Itoa(round) + "#timer"
}
func (s *State) deadlineTimerID() string { return s.sessionID + "#deadline" }
func (s *State) reportTaskID(pid string) string {
	return s.sessionID + "/report/" + pid
}
func (s *State) actionTaskID(pid string) string {
	return s.sessionID + "/action/" + pid
}

// deadlineAt returns the absolute global deadline, or 0 when there is none.
func (s *State) deadlineAt() int64 {
	if d := s.req.WaitingPolicy.GlobalDeadlineMs; d != nil {
		return s.startedAt + *d
	}
	return 0
}

// deadlinePassed is spec §6's deadlinePassed() evaluated at time at.
func (s *State) deadlinePassed(at int64) bool {
	d := s.req.WaitingPolicy.GlobalDeadlineMs
	return d != nil && at-s.startedAt >= *d
}

// rebuildIndex indexes the catalog from scratch. A duplicate id is left
// out, so the index then has fewer entries than the catalog (State.check).
func (s *State) rebuildIndex() {
	s.index = claimIndex{}
	s.index.reserve(s.catalog, len(s.catalog))
	for i := range s.catalog {
		s.index.add(s.catalog, i)
	}
}

// claimPos returns the catalog position of the claim with id id.
func (s *State) claimPos(id string) (int, bool) { return s.index.lookup(s.catalog, id) }

// Clone returns a deep copy of s (via the state encoding, which is the
// definition of state identity).
func (s *State) Clone() *State {
	c, err := DecodeState(EncodeState(s))
	if err != nil {
		panic("consensus: state does not survive its own encoding: " + err.Error())
	}
	return c
}
