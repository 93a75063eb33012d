package sinks

// HumanDelay is humanDelay, for the tests of package sinks_test.
var HumanDelay = humanDelay
