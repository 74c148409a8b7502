// Outside a component there is no weir host: tests use MockHost from
// weir-sdk/testing. See host-wit.js for the one inside a component.

export const witHost = undefined;
