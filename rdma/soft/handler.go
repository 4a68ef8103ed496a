package soft

// handlerState tracks the CQs whose completion handlers have work.
type handlerState struct{}
