// ReDoc's footer logo is a hard-coded CDN address, which the CSP (img-src 'self') blocks: no page
// of ours loads anything from elsewhere. Point that one image at a file served from here, however
// ReDoc's React sets it (the src property or the attribute). Loaded before the ReDoc bundle.
(function () {
  "use strict";
  var cdnLogo = "https://cdn.redoc.ly/redoc/logo-mini.svg";
  var localLogo = document.currentScript.getAttribute("data-logo");
  var local = function (value) { return value === cdnLogo ? localLogo : value; };
  var setAttribute = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (name, value) {
    return setAttribute.call(this, name, name === "src" ? local(value) : value);
  };
  var src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
  Object.defineProperty(HTMLImageElement.prototype, "src", {
    configurable: true,
    enumerable: src.enumerable,
    get: src.get,
    set: function (value) { src.set.call(this, local(value)); }
  });
})();
