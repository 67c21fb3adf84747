// @restatedev/restate-sdk 1.17 calls Promise.withResolvers (Node >= 22); Node 20 lacks it.
// Imported before the SDK by both apps (ES modules are evaluated in import order), it adds
// the standard one where it is missing and does nothing on Node 22 and later.
if (typeof Promise.withResolvers !== "function") {
  Promise.withResolvers = function withResolvers() {
    let resolve;
    let reject;
    const promise = new this((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}
