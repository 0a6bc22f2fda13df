package list

// NewCmdWithClock lets the tests, which also run the plugin's root command
// (so they are outside the package: it imports this one), fix the clock.
var NewCmdWithClock = newCmd
